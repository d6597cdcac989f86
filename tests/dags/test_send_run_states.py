"""The send DAG's run state and its after_send task after today's folds (issue 29: the preflight
in plan, flag_unconfirmed and announce in after_send), by real Airflow (``airflow dags test``):
a plan that fails turns the run red; OUTREACH_PREFLIGHT=block fails the blocked mailbox's batch
with what to fix; a send that leaves a row unconfirmed still updates the review asset (the
review DAG queued) and alerts once, and a second run alerts and announces nothing again."""

from __future__ import annotations

import json
import sqlite3

import pytest

from outreach.queue import queue_due
from support.airflowhome import env_for, fresh_home, run_task_states
from support.dnszone import dns_server, good_zone, rsa_key
from support.faultsmtp import FaultSMTPServer
from support.flow import EXPECTED_LEADS, import_demo, rows, scalar

pytestmark = pytest.mark.airflow

DEMO_DOMAIN, IP = "mail.outreach-demo.example", "192.0.2.25"


def task_states(home) -> dict[str, set[str]]:
    with sqlite3.connect(home / "airflow.db") as meta:
        out: dict[str, set[str]] = {}
        for task_id, state in meta.execute("SELECT task_id, state FROM task_instance"
                                           " WHERE dag_id = 'outreach_send'"):
            out.setdefault(task_id, set()).add(state)
        return out


def asset_events(home) -> list[tuple]:
    with sqlite3.connect(home / "airflow.db") as meta:
        return [(uri, task, json.loads(extra)) for uri, task, extra in meta.execute(
            "SELECT a.uri, e.source_task_id, e.extra FROM asset_event e JOIN asset a"
            " ON a.id = e.asset_id ORDER BY e.id")]


def queued_dags(home) -> list[tuple]:
    with sqlite3.connect(home / "airflow.db") as meta:
        return list(meta.execute("SELECT a.uri, q.target_dag_id FROM asset_dag_run_queue q"
                                 " JOIN asset a ON a.id = q.asset_id ORDER BY a.uri"))


def test_a_plan_that_fails_turns_the_run_red(db_url, sink, migrated_airflow_home, tmp_path,
                                            shared_airflow):
    """The first task, plan, fails without retrying when its config check fails ("clear it once
    fixed", docs/reference/limits-and-config-check.md); the run must not come out green."""
    import_demo(db_url)
    queue_due(db_url)
    # A migrated home of its own: where the run goes if it cannot share the worker's process.
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    env["OUTREACH_PREFLIGHT"] = "sometimes"  # a settings problem the config check names
    result = shared_airflow.run_dag(env, "outreach_send", tmp_path / "send.log")
    log = result.log.read_text()
    states = run_task_states(result)
    assert states.get("plan") == {"failed"}, (states, log[-3000:])
    assert "OUTREACH_PREFLIGHT" in log
    assert sink.messages() == []
    # Nothing was sent and the operator must fix a setting: the run is red, not green.
    assert result.state == "failed", (result.state, states)


def test_block_mode_fails_the_blocked_mailboxes_batches_with_what_to_fix(
        db_url, sink, migrated_airflow_home, tmp_path, shared_airflow):
    import_demo(db_url)
    queue_due(db_url)
    no_dmarc = [r for r in good_zone(DEMO_DOMAIN, "s2026", rsa_key(), IP)
                if "_dmarc" not in str(r.rname)]
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    with dns_server(no_dmarc) as ns:
        env.update(OUTREACH_PREFLIGHT="block", OUTREACH_DNS_NAMESERVER=ns, OUTREACH_SENDING_IP=IP)
        result = shared_airflow.run_dag(env, "outreach_send", tmp_path / "send.log")
    log = result.log.read_text()
    assert result.state == "failed", log[-4000:]
    assert run_task_states(result) == {"plan": {"success"}, "send_batch": {"failed"},
                                 "summary": {"failed"}, "after_send": {"success"}}
    assert log.index("preflight: ") < log.index("plan: ")
    assert "due email(s) not sent, preflight FAIL: " in log and "DMARC" in log, log[-4000:]
    assert f"fix the DNS records (outreach preflight {DEMO_DOMAIN}) and clear this task" in log
    assert sink.messages() == []
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'") == \
        EXPECTED_LEADS


def test_a_send_that_leaves_a_row_unconfirmed_queues_the_review_and_alerts_once(
        db_url, migrated_airflow_home, tmp_path, dag_session):
    import_demo(db_url)
    queue_due(db_url)
    victim = rows(db_url, "SELECT e.id, l.email FROM outreach.emails e JOIN outreach.leads l"
                          " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0]
    with FaultSMTPServer({victim["email"]: ["drop"]}) as smtp:
        home = fresh_home(migrated_airflow_home, tmp_path, "home")
        env = env_for(home, db_url, smtp)
        env.update(OUTREACH_SEND_PARALLELISM="1", OUTREACH_BATCH_SIZE="500",
                   AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY="0")
        # The reserialize and both runs in one Airflow process of this home (the review DAG's
        # queue is read here).
        airflow = dag_session(env)
        stored = airflow.run_command(["dags", "reserialize"], tmp_path / "reserialize.log")
        assert stored == 0, (tmp_path / "reserialize.log").read_text()[-3000:]
        first = airflow.run_dag("outreach_send", tmp_path / "first.log")
        after_first = asset_events(home)
        queued_first = queued_dags(home)
        second = airflow.run_dag("outreach_send", tmp_path / "second.log")  # nothing left to send
        messages = smtp.messages()
    log = first.log.read_text()
    assert first.state == "failed", log[-4000:]  # the unconfirmed row fails its send task
    assert task_states(home)["after_send"] == {"success"}
    assert rows(db_url, "SELECT status::text AS s, failure_kind AS k FROM outreach.emails"
                        " WHERE id = %s", (victim["id"],)) == [{"s": "failed", "k": "unconfirmed"}]
    unconfirmed = [e for e in after_first if e[0] == "outreach://unconfirmed/"]
    assert unconfirmed == [("outreach://unconfirmed/", "after_send", {"unlisted": [victim["id"]]})]
    assert queued_first == [("outreach://unconfirmed/", "outreach_unconfirmed_review")]
    sent_events = [e for e in after_first if e[0] == "outreach://events/sent"]
    assert len(sent_events) == 1 and sent_events[0][2]["count"] == EXPECTED_LEADS - 1
    assert len(messages) == EXPECTED_LEADS  # the dropped one reached the server too
    # One alert about the unconfirmed email, whichever run found it.
    assert rows(db_url, "SELECT event_key FROM outreach.alerts WHERE kind = 'unconfirmed'") == [
        {"event_key": f"unconfirmed:{victim['id']}"}]

    # The second run (nothing due; the email still waits for its Required Action): the review
    # asset is updated again (that is how a paused review DAG catches up), but no second alert,
    # and no event range is announced twice.
    assert second.ok, second.log.read_text()[-4000:]
    again = asset_events(home)[len(after_first):]
    assert [e[0] for e in again] == ["outreach://unconfirmed/"], again
    assert len(rows(db_url, "SELECT 1 FROM outreach.alerts WHERE kind = 'unconfirmed'")) == 1
