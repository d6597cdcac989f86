"""The real scheduler: api-server, scheduler, dag-processor and triggerer (LocalExecutor,
PostgreSQL metadata) run import → queue → send on the sample data; then a successful and a failed
send task instance are cleared through the REST API and re-run. Nothing is sent twice, nothing is
lost, and no process is left behind. The first test runs in the deployment it shares with the
other operator tests (``local_deployment``); the second needs the schedules on, in one of its own."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from outreach.campaign import sync_mailboxes
from outreach.queue import reap
from support import invariants
from support.deployment import (
    BASE_ENV,
    FINAL,
    accepted_once,
    clear_and_wait,
    only_dags,
    run_and_wait,
    running_deployment,
    send_tis,
    trigger,
    wait_for,
    wait_run,
)
from support.flow import rows, scalar
from support.paths import MAILBOXES
from support.sources import drop, file_campaign

pytestmark = pytest.mark.airflow

DAGS = ("outreach_import_leads", "outreach_queue_due", "outreach_send", "outreach_transactional")

# While this trigger exists, recording a sent email of mailbox 2 fails: the SMTP server has taken
# the message but the send log cannot be written, so the task fails (and is retried, and fails).
BREAK_LEDGER = """
CREATE FUNCTION outreach.test_break_ledger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'injected: send log unavailable'; END $$;
CREATE TRIGGER test_break_ledger BEFORE INSERT ON outreach.send_log
FOR EACH ROW WHEN (NEW.mailbox_id = 2) EXECUTE FUNCTION outreach.test_break_ledger();
"""
MEND_LEDGER = "DROP TRIGGER test_break_ledger ON outreach.send_log; DROP FUNCTION outreach.test_break_ledger();"


def test_scheduler_runs_the_main_job_and_clearing_sends_nothing_twice(local_deployment):
    dep, token, db_url, relay = (local_deployment.dep, local_deployment.token, local_deployment.url,
                                 local_deployment.relay)
    wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", token)["dags"]} >= set(DAGS), 180,
             "the dag-processor to parse the DAGs")
    for dag_id in DAGS:
        dep.api("PATCH", f"/dags/{dag_id}", token, json={"is_paused": False})

    assert run_and_wait(dep, token, "outreach_import_leads")["state"] == "success"
    assert run_and_wait(dep, token, "outreach_queue_due")["state"] == "success"

    # Run A: 4 mapped batches of at most 25 rows across both mailboxes, all successful.
    run_a = run_and_wait(dep, token, "outreach_send")
    assert run_a["state"] == "success"
    tis_a = send_tis(dep, token, run_a["dag_run_id"])
    assert len(tis_a) == 4 and {t["state"] for t in tis_a} == {"success"}
    after_a = len(relay.messages())
    assert after_a == 100

    # Clear a successful send task: its re-run claims fresh rows or none, never its old ones.
    rerun = clear_and_wait(dep, token, run_a["dag_run_id"], tis_a[:1], only_failed=False)
    assert rerun["state"] == "success"
    accepted_once(relay.messages())
    assert after_a <= len(relay.messages()) <= after_a + 25
    invariants.assert_ok(db_url, relay.messages())

    # Run B with a broken send log for mailbox 2: each try hands one message of mailbox 2 to the
    # server, cannot record it, and fails; after its retries every batch has failed.
    with psycopg.connect(db_url) as c:
        c.execute(BREAK_LEDGER)
    run_b = run_and_wait(dep, token, "outreach_send")
    assert run_b["state"] == "failed"
    failed = [t for t in send_tis(dep, token, run_b["dag_run_id"]) if t["state"] == "failed"]
    assert failed and all(t["try_number"] == 3 for t in failed)  # retried twice, failed each time
    stuck = rows(db_url, "SELECT id FROM outreach.emails WHERE status = 'sending'")
    assert len(stuck) == 3 * len(failed)  # one handed-off, unrecorded row per failed try
    accepted_once(relay.messages())

    # Mend the ledger and clear the failed tasks: they send fresh rows and succeed.
    with psycopg.connect(db_url) as c:
        c.execute(MEND_LEDGER)
    assert clear_and_wait(dep, token, run_b["dag_run_id"], failed, only_failed=True)["state"] == "success"
    for _ in range(5):  # later scheduled runs send the rest
        if not rows(db_url, "SELECT id FROM outreach.emails WHERE status = 'queued'"):
            break
        assert run_and_wait(dep, token, "outreach_send")["state"] == "success"

    # The messages taken while the ledger was broken are still 'sending'; the reaper makes them
    # unconfirmed for a person to decide. Everything else was sent exactly once; nothing is lost.
    reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31))
    messages = relay.messages()
    totals = invariants.assert_ok(db_url, messages)
    assert totals.unconfirmed == len(stuck)
    assert totals.sent_rows + totals.unconfirmed == len(messages) == 196

    # Transactional mail through the REST API: two triggers with one delivery key, at once.
    sync_mailboxes(db_url, MAILBOXES)
    conf = {"delivery_key": "welcome:signup-7", "to": "new.user@example.com", "template": "welcome",
            "context": {"user": {"name": "Kim"}, "verify_url": "https://app.example/v?t=7"}}
    runs = [trigger(dep, token, "outreach_transactional", conf) for _ in range(2)]
    assert [wait_run(dep, token, "outreach_transactional", r)["state"] for r in runs] == ["success"] * 2
    welcome = [m for m in relay.messages() if m["X-Outreach-Step"] == "transactional/welcome"]
    assert len(welcome) == 1 and welcome[0]["To"] == "new.user@example.com"
    assert invariants.assert_ok(db_url, relay.messages()).unconfirmed == len(stuck)


def test_an_import_run_triggers_queue_due_through_the_leads_asset(pg_admin_url, airflow_meta_template, db_url,
                                                                 tmp_path):
    """Issue 14: the real scheduler starts ``outreach_queue_due`` from the leads Asset an import
    run updated, without waiting for its cron. Schedules stay on (``OUTREACH_SCHEDULES=off`` turns
    Asset schedules off too: no DAG is scheduled), but neither cron can fire during the test: the
    campaign's import DAG is scheduled only on an Asset nothing updates, and queue_due's cron is
    New Year (its one catch-up run on unpausing, before any lead exists, is waited for first)."""
    inbox, folder = tmp_path / "inbox", tmp_path / "campaigns"
    drop(inbox, "a.csv", 5)
    campaign = file_campaign(folder, f"file://{inbox}/*.csv")
    campaign.write_text(campaign.read_text().replace("source:", 'schedule: "dbt://nothing/updates-this"\nsource:'))
    importer = "outreach_import_source_files_q4"
    env = {k: v for k, v in BASE_ENV.items() if k != "OUTREACH_SCHEDULES"}
    with running_deployment(pg_admin_url, airflow_meta_template, db_url, tmp_path, {
            **env, "OUTREACH_CAMPAIGNS": str(folder), "OUTREACH_QUEUE_DUE_SCHEDULE": "0 0 1 1 *",
            **only_dags(tmp_path / "dags", "outreach_import_sources", "outreach_queue_due")}) as dep:
        token = dep.token()
        wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", token)["dags"]} >=
                 {importer, "outreach_queue_due"}, 180, "the dag-processor to parse the DAGs")

        def queue_runs() -> list[dict]:
            return dep.api("GET", "/dags/outreach_queue_due/dagRuns", token)["dag_runs"]

        dep.api("PATCH", "/dags/outreach_queue_due", token, json={"is_paused": False})
        [catch_up] = wait_for(lambda: (r := queue_runs()) and all(x["state"] in FINAL for x in r) and r,
                              180, "queue_due's catch-up run on unpausing")
        assert catch_up["run_type"] == "scheduled" and catch_up["state"] == "success"

        dep.api("PATCH", f"/dags/{importer}", token, json={"is_paused": False})
        imported = run_and_wait(dep, token, importer)
        assert imported["state"] == "success"
        assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 5

        by_asset = wait_for(lambda: [r for r in queue_runs() if r["run_type"] == "asset_triggered"
                                     and r["state"] in FINAL], 180, "an asset-triggered queue_due run")
        assert [r["state"] for r in by_asset] == ["success"]
        events = dep.api("GET", f"/dags/outreach_queue_due/dagRuns/{by_asset[0]['dag_run_id']}"
                         "/upstreamAssetEvents", token)["asset_events"]
        assert [(e["uri"], e["source_dag_id"], e["source_run_id"]) for e in events] == [
            ("outreach://leads/files-q4", importer, imported["dag_run_id"])]
        assert sorted(r["run_type"] for r in queue_runs()) == ["asset_triggered", "scheduled"]
    queued = rows(db_url, "SELECT l.email, s.position, e.status FROM outreach.emails e "
                  "JOIN outreach.leads l ON l.id = e.lead_id JOIN outreach.sequence_steps s ON s.id = e.step_id "
                  "ORDER BY l.email")
    assert queued == [{"email": f"f{i}@drop.example", "position": 1, "status": "queued"} for i in range(5)]
