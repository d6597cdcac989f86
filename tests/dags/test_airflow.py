"""The DAGs, run by real Airflow (``airflow dags test``, SQLite metadata): in the pytest worker's shared
Airflow process (support.airflowhome.SharedAirflow) unless a test proves something of a process
of its own (two runs at once, a second trigger in a new process)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from outreach.dev.localairflow import DagTestSession, airflow_env, run_dag
from outreach.queue import queue_due
from support import invariants
from support.airflowhome import env_for, fresh_home
from support.flow import EXPECTED_LEADS, import_demo, leave_unconfirmed, rows, scalar
from support.paths import MAILBOXES, ROOT

pytestmark = pytest.mark.airflow

PARSE_PROBE = r"""
import json, socket, sys
def refuse(*a, **k):
    raise RuntimeError("network or database access at DAG parse time")
socket.socket.connect = refuse
socket.create_connection = refuse
import psycopg
psycopg.connect = refuse
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {},
       "warnings": {k: list(v) for k, v in bag.captured_warnings.items()}}
for dag_id, dag in bag.dags.items():
    out["dags"][dag_id] = {
        "tags": sorted(dag.tags), "doc_md": bool(dag.doc_md),
        # A cron, or the cron of a cron-or-Asset schedule (outreach_queue_due's).
        "schedule": getattr(dag.timetable, "expression", None)
        or getattr(getattr(dag.timetable, "timetable", None), "expression", None),
        "assets": sorted(a.uri for a in getattr(getattr(dag.timetable, "asset_condition", None),
                                                "objects", []) if hasattr(a, "uri")),
        "access": sorted(dag.access_control or {}),
        "tasks": {t.task_id: {"retries": t.retries, "owner": t.owner} for t in dag.tasks}}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("schedules", ["on", "off"])
def test_every_dag_loads_without_database_or_network(tmp_path, schedules):
    env = airflow_env(tmp_path / "home", "postgresql:///none?host=/nonexistent-socket-dir", {})
    env["OUTREACH_SCHEDULES"] = schedules
    proc = subprocess.run([sys.executable, "-c", PARSE_PROBE, str(ROOT / "dags")], env=env,
                          capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(line[len("RESULT "):])
    assert result["errors"] == {}
    # A parse warning is shown for every DAG file in the dag-processor's log: none is expected
    # (access_control's Airflow 4 warning is silenced: outreach.airflow.defaults.dag_kwargs).
    assert result["warnings"] == {}
    assert set(result["dags"]) == {"outreach_import_leads", "outreach_queue_due", "outreach_send",
                                   "outreach_resolve_unconfirmed", "outreach_report", "outreach_suppress",
                                   "outreach_unsuppress", "outreach_mailbox_pause", "outreach_mailbox_resume",
                                   "outreach_postmaster", "outreach_transactional", "outreach_inbox",
                                   "outreach_lead_stop", "outreach_campaign_pause",
                                   "outreach_campaign_resume", "outreach_campaign_test_send", "outreach_requeue",
                                   "outreach_import_sources", "outreach_unconfirmed_review",
                                   "outreach_retention", "outreach_campaign_approval",
                                   "outreach_webhooks", "outreach_lead_erase", "outreach_export",
                                   "outreach_import_suppression_sources",
                                   "outreach_notify_replies"}
    scheduled = {d: dag["schedule"] for d, dag in result["dags"].items() if dag["schedule"] is not None}
    if schedules == "on":
        assert scheduled == {"outreach_queue_due": "*/15 * * * *", "outreach_send": "*/10 * * * *",
                             "outreach_report": "0 7 * * *", "outreach_postmaster": "0 7 * * *",
                             "outreach_transactional": "* * * * *", "outreach_inbox": "*/10 * * * *",
                             "outreach_import_sources": "0 * * * *",
                             "outreach_import_suppression_sources": "0 * * * *",
                             "outreach_retention": "30 3 * * *",
                             "outreach_campaign_approval": "*/5 * * * *",
                             "outreach_webhooks": "* * * * *"}
        # A file import from the form updates the demo campaign's leads Asset: queue-due starts.
        assert result["dags"]["outreach_queue_due"]["assets"] == ["outreach://leads/q4-ops-intro"]
        # Issue 26: the inbox's replies Asset schedules the reply notifications.
        assert result["dags"]["outreach_notify_replies"]["assets"] == ["outreach://events/replies"]
    else:  # OUTREACH_SCHEDULES=off: every DAG runs only when triggered
        assert scheduled == {}
    # Who may run each DAG (FAB access_control, outreach.airflow.roles): admins alone may
    # suppress, unsuppress, erase and approve launches; operators (and admins) run every other.
    access = {d: dag["access"] for d, dag in result["dags"].items()}
    admin_only = {"outreach_suppress", "outreach_unsuppress", "outreach_lead_erase",
                  "outreach_campaign_approval"}
    assert {d for d, roles in access.items() if roles == ["Admin"]} == admin_only
    assert all(roles == ["Admin", "Operator"] for d, roles in access.items()
               if d not in admin_only), access
    for dag_id, dag in result["dags"].items():
        assert "outreach" in dag["tags"] and dag["doc_md"], dag_id
        for task_id, task in dag["tasks"].items():
            assert task["retries"] >= 1 and task["owner"] == "outreach", (dag_id, task_id)


def test_main_job_through_airflow_twice_adds_nothing(db_url, sink, migrated_airflow_home, tmp_path):
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    for round_ in (1, 2):
        with DagTestSession(env) as airflow:  # a round's three runs in one Airflow process, its own
            for dag_id in ("outreach_import_leads", "outreach_queue_due", "outreach_send"):
                result = airflow.run_dag(dag_id, tmp_path / f"{dag_id}-{round_}.log")
                assert result.ok, f"{dag_id} round {round_}: {result.state}, see {result.log}:\n" + \
                    result.log.read_text()[-4000:]
        messages = sink.messages()
        totals = invariants.assert_ok(db_url, messages)
        assert len(messages) == totals.send_log == totals.sent_rows == EXPECTED_LEADS
    log = (tmp_path / "outreach_send-1.log").read_text()
    assert "batch mailbox=1 (anna — sales) claimed=" in log
    assert "anna.schmidt@" not in log  # addresses are masked in task logs
    assert "test-secret-0123456789" not in log


def test_two_overlapping_send_runs_add_no_message(db_url, sink, migrated_airflow_home, tmp_path):
    import_demo(db_url)
    assert queue_due(db_url)["queued"] == EXPECTED_LEADS
    results = {}

    def run(name: str) -> None:
        env = env_for(fresh_home(migrated_airflow_home, tmp_path, name), db_url, sink)
        env["OUTREACH_BATCH_SIZE"] = "10"  # many small batches, so the two runs really interleave
        env["OUTREACH_SEND_PARALLELISM"] = "20"  # 20 × 10 rows: each run could send everything
        results[name] = run_dag(env, "outreach_send", tmp_path / f"{name}.log")

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, r in results.items():
        assert r.ok, f"run {name}: {r.state}, see {r.log}"
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    assert len(messages) == EXPECTED_LEADS
    run_ids = {r["claimed_by"].split("/")[1]
               for r in rows(db_url, "SELECT DISTINCT claimed_by FROM outreach.emails")}
    assert len(run_ids) == 2, "both runs should have claimed some rows"


def test_operator_resolves_unconfirmed_emails_through_the_dag(db_url, sink, migrated_airflow_home, tmp_path,
                                                              shared_airflow):
    import_demo(db_url)
    queue_due(db_url)
    held = leave_unconfirmed(db_url, 3)  # a sender lost during the handoffs
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    conf = {"decision": "not_sent", "email_ids": f"{held[0]}, {held[1]}", "resolved_by": "Dana (ops)",
            "note": "not in Sent Items", "campaign_key": None, "mailbox": None}
    result = shared_airflow.run_dag(env, "outreach_resolve_unconfirmed", tmp_path / "resolve.log", conf=conf)
    assert result.ok, result.log.read_text()[-4000:]
    states = {r["id"]: (r["status"], r["failure_kind"]) for r in rows(
        db_url, "SELECT id, status::text AS status, failure_kind FROM outreach.emails WHERE id = ANY(%s)", (held,))}
    assert states == {held[0]: ("queued", None), held[1]: ("queued", None), held[2]: ("failed", "unconfirmed")}
    assert "resolve not_sent: resolved=2" in result.log.read_text()


def test_operator_suppresses_a_domain_through_the_dag(db_url, sink, migrated_airflow_home, tmp_path,
                                                      shared_airflow):
    import_demo(db_url)
    queue_due(db_url)
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    airflow = shared_airflow.bound(env)  # the worker's Airflow process
    conf = {"value": "@Coho-Winery.example", "reason": "manual", "requested_by": "Dana (ops)"}
    result = airflow.run_dag("outreach_suppress", tmp_path / "suppress.log", conf=conf)
    assert result.ok, result.log.read_text()[-4000:]
    cancelled = rows(db_url, "SELECT count(*) AS n FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                             " WHERE l.email LIKE '%%@coho-winery.example' AND e.status = 'suppressed'")[0]["n"]
    assert cancelled > 0
    assert rows(db_url, "SELECT kind, value, source FROM outreach.suppressions WHERE kind = 'domain'"
                        " AND value = 'coho-winery.example'") == [
        {"kind": "domain", "value": "coho-winery.example", "source": "operator:Dana (ops)"}]
    assert f"cancelled {cancelled} queued email(s)" in result.log.read_text()

    conf = {"value": "@coho-winery.example", "why": "contract signed (ticket 4711)", "requested_by": "Dana (ops)"}
    result = airflow.run_dag("outreach_unsuppress", tmp_path / "unsuppress.log", conf=conf)
    assert result.ok, result.log.read_text()[-4000:]
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.suppressions WHERE kind = 'domain'"
                        " AND value = 'coho-winery.example'")[0]["n"] == 0
    events = rows(db_url, "SELECT * FROM outreach.suppression_events WHERE value = 'coho-winery.example' ORDER BY id")
    assert (events[-1]["action"], events[-1]["actor"], events[-1]["note"]) == (
        "unsuppress", "Dana (ops)", "contract signed (ticket 4711)")
    # The audit trail names the Airflow user who triggered each run (`airflow dags test` runs
    # as "dag_test"), not the typed name, which is kept in the details (issue 27).
    audit = rows(db_url, "SELECT actor, via, action, target_key, dag_id, run_id, details->>'by' AS by"
                         " FROM outreach.audit_log ORDER BY id")
    assert [(a["actor"], a["via"], a["action"], a["target_key"], a["dag_id"], a["by"])
            for a in audit] == [
        ("dag_test", "airflow", "suppress", "coho-winery.example", "outreach_suppress", "Dana (ops)"),
        ("dag_test", "airflow", "unsuppress", "coho-winery.example", "outreach_unsuppress",
         "Dana (ops)")]
    assert all(a["run_id"] for a in audit)


ANNA = "anna.schmidt@mail.outreach-demo.example"


def test_pause_and_resume_dags_with_their_params(db_url, sink, migrated_airflow_home, tmp_path, shared_airflow):
    import_demo(db_url)
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    airflow = shared_airflow.bound(env)  # the worker's Airflow process
    paused = airflow.run_dag("outreach_mailbox_pause", tmp_path / "pause.log",
                         conf={"mailbox": ANNA, "reason": "complaint from acme", "operator": "alice"})
    assert paused.ok, paused.log.read_text()[-4000:]
    assert rows(db_url, "SELECT status, paused_by, paused_reason FROM outreach.mailboxes"
                        " ORDER BY id") == [
        {"status": "paused", "paused_by": "alice", "paused_reason": "complaint from acme"},
        {"status": "active", "paused_by": None, "paused_reason": None}]
    resumed = airflow.run_dag("outreach_mailbox_resume", tmp_path / "resume.log",
                          conf={"mailbox": "1", "why": "acme confirmed a mistake", "operator": "bob"})
    assert resumed.ok, resumed.log.read_text()[-4000:]
    assert rows(db_url, "SELECT event, actor, reason FROM outreach.mailbox_events ORDER BY id") == [
        {"event": "paused", "actor": "alice", "reason": "complaint from acme"},
        {"event": "resumed", "actor": "bob", "reason": "acme confirmed a mistake"}]
    assert rows(db_url, "SELECT status FROM outreach.mailboxes WHERE id = 1") == [{"status": "active"}]
    pause_log = paused.log.read_text()
    assert "mailbox 1 (a***@mail.outreach-demo.example) paused" in pause_log
    assert ANNA not in pause_log  # addresses are masked in task logs


def test_lead_stop_and_campaign_pause_dags_with_their_params(db_url, sink, migrated_airflow_home,
                                                            tmp_path, shared_airflow):
    import_demo(db_url)
    queue_due(db_url)
    lead = rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                        " ORDER BY e.id LIMIT 1")[0]["email"]
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    airflow = shared_airflow.bound(env)  # the worker's Airflow process
    stopped = airflow.run_dag("outreach_lead_stop", tmp_path / "stop.log",
                          conf={"address": lead, "campaign": "q4-ops-intro",
                                "reason": "asked by phone", "operator": "Dana (ops)"})
    assert stopped.ok, stopped.log.read_text()[-4000:]
    assert rows(db_url, "SELECT en.status, en.stopped_by, en.stop_reason, e.status::text AS email"
                        " FROM outreach.enrollments en JOIN outreach.leads l ON l.id = en.lead_id"
                        " JOIN outreach.emails e ON e.lead_id = l.id WHERE l.email = %s", (lead,)) == [
        {"status": "stopped", "stopped_by": "Dana (ops)", "stop_reason": "asked by phone",
         "email": "cancelled"}]
    stop_log = stopped.log.read_text()
    assert "stopped; cancelled 1 queued email(s)" in stop_log and lead not in stop_log

    paused = airflow.run_dag("outreach_campaign_pause", tmp_path / "pause.log",
                         conf={"campaign": "q4-ops-intro", "reason": "legal review", "operator": "alice"})
    assert paused.ok, paused.log.read_text()[-4000:]
    sent = airflow.run_dag("outreach_send", tmp_path / "send-paused.log")
    assert sent.ok, sent.log.read_text()[-4000:]
    assert sink.messages() == []  # paused: nothing claimed
    resumed = airflow.run_dag("outreach_campaign_resume", tmp_path / "resume.log",
                          conf={"campaign": "q4-ops-intro", "why": "approved", "operator": "bob"})
    assert resumed.ok, resumed.log.read_text()[-4000:]
    assert rows(db_url, "SELECT event, actor, reason FROM outreach.campaign_events ORDER BY id") == [
        {"event": "paused", "actor": "alice", "reason": "legal review"},
        {"event": "resumed", "actor": "bob", "reason": "approved"}]
    sent = airflow.run_dag("outreach_send", tmp_path / "send.log")
    assert sent.ok, sent.log.read_text()[-4000:]
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    assert len(messages) == EXPECTED_LEADS - 1 and lead not in {m["X-RcptTo"] for m in messages}


def test_lead_erase_dag_with_its_params(db_url, sink, migrated_airflow_home, tmp_path, shared_airflow):
    import_demo(db_url)
    lead = rows(db_url, "SELECT email FROM outreach.leads ORDER BY id LIMIT 1")[0]["email"]
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    env["OUTREACH_ERASURE_KEY"] = "dag-test-erasure-key-0123456789abcdef"
    airflow = shared_airflow.bound(env)
    erased = airflow.run_dag("outreach_lead_erase", tmp_path / "erase.log",
                             conf={"address": lead, "reason": "ticket 9", "operator": "Dana (admin)"})
    assert erased.ok, erased.log.read_text()[-4000:]
    assert rows(db_url, "SELECT actor, reason, counts->>'leads' AS leads FROM outreach.erasures") == [
        {"actor": "Dana (admin)", "reason": "ticket 9", "leads": "1"}]
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads WHERE email = %s", (lead,)) == 0
    assert lead not in erased.log.read_text()


def test_campaign_test_send_dag_with_its_params(db_url, sink, migrated_airflow_home, tmp_path,
                                                shared_airflow):
    import_demo(db_url)
    before = rows(db_url, "SELECT id, xmin::text AS x FROM outreach.enrollments ORDER BY id")
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    run = shared_airflow.run_dag(env, "outreach_campaign_test_send", tmp_path / "test-send.log",
                                 conf={"campaign": "q4-ops-intro", "to": ["seed@seeds.example"],
                                       "operator": "erin"})
    assert run.ok, run.log.read_text()[-4000:]
    assert [m["X-RcptTo"] for m in sink.messages()] == ["seed@seeds.example"]
    assert rows(db_url, "SELECT recipient, actor FROM outreach.test_sends") == [
        {"recipient": "seed@seeds.example", "actor": "erin"}]
    assert rows(db_url, "SELECT id, xmin::text AS x FROM outreach.enrollments ORDER BY id") == before
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.emails") == [{"n": 0}]
    assert "seed@seeds.example" not in run.log.read_text()  # masked in the task log


def test_postmaster_dag_with_a_service_account_connection(db_url, sink, migrated_airflow_home,
                                                          tmp_path, shared_airflow):
    """The daily DAG through real Airflow: google-auth signs a JWT with the service account key
    from the Airflow connection, trades it at the (local) token endpoint, reads the (local)
    Postmaster API, stores the figures and pauses on the spam rate."""
    import datetime as dt

    from support.fakepostmaster import FakePostmaster

    import_demo(db_url)
    api = FakePostmaster(token="local-access-token").start()
    try:
        today = dt.datetime.now(dt.UTC).date()
        api.set("mail.outreach-demo.example", today - dt.timedelta(days=2), 0.0015)
        env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
        env["AIRFLOW_CONN_OUTREACH_POSTMASTER"] = api.connection_json()
        env["OUTREACH_POSTMASTER_BASE_URL"] = api.base_url
        result = shared_airflow.run_dag(env, "outreach_postmaster", tmp_path / "postmaster.log")
    finally:
        api.stop()
    log = result.log.read_text()
    assert result.ok, log[-4000:]
    grants = [r for r in api.requests if r["path"] == "/token"]
    assert grants and grants[0]["form"]["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assert all(r["auth"] == "Bearer local-access-token" for r in api.requests if r["path"] != "/token")
    known = rows(db_url, "SELECT count(*) FILTER (WHERE has_data) AS known, count(*) AS n"
                         " FROM outreach.postmaster_stats")[0]
    assert known == {"known": 1, "n": 3 * 14}
    assert rows(db_url, "SELECT DISTINCT status, paused_by FROM outreach.mailboxes") == [
        {"status": "paused", "paused_by": "postmaster"}]
    assert "PRIVATE KEY" not in log and "local-access-token" not in log


def test_transactional_dag_triggered_twice_with_one_key_sends_once(db_url, sink, migrated_airflow_home,
                                                                     tmp_path, dag_session, shared_airflow):
    from outreach.campaign import sync_mailboxes

    sync_mailboxes(db_url, MAILBOXES)
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    conf = {"delivery_key": "signup-42", "to": "new.user@example.com", "template": "welcome",
            "context": {"user": {"name": "Kim"}, "verify_url": "https://app.example/v?t=1"}}
    result = shared_airflow.run_dag(env, "outreach_transactional", tmp_path / "tx1.log", conf=conf)
    assert result.ok, result.log.read_text()[-4000:]
    airflow = dag_session(env)  # the second trigger in a process of its own; the bad request after it
    result = airflow.run_dag("outreach_transactional", tmp_path / "tx2.log", conf=conf)
    assert result.ok, result.log.read_text()[-4000:]
    [msg] = sink.messages()
    assert msg["To"] == "new.user@example.com" and msg["X-Outreach-Step"] == "transactional/welcome"
    assert rows(db_url, "SELECT delivery_key, status::text AS status FROM outreach.emails") == [
        {"delivery_key": "signup-42", "status": "sent"}]
    # A request that cannot be enqueued fails the run at once, naming the field.
    bad = airflow.run_dag("outreach_transactional", tmp_path / "bad.log",
                      conf={**conf, "delivery_key": "signup-43", "to": "not-an-address"})
    assert not bad.ok and "to: " in bad.log.read_text()
    invariants.assert_ok(db_url, sink.messages())


def test_a_dead_relay_fails_its_send_batch_task_and_spends_no_attempt(db_url, sink, migrated_airflow_home, tmp_path):
    """Issue 12.6b: a relay refusing connections burned an attempt of every claimed row per run
    while the DAG run succeeded. Mailbox 1's relay refuses; mailbox 2's works. The send_batch
    tasks fail with one line naming the connection and the errno; mailbox 2's mail went out in
    the same tasks; mailbox 1's rows are queued with no attempt counted."""
    from outreach.dev.devsmtp import free_port

    import_demo(db_url)
    queue_due(db_url)
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    env["AIRFLOW_CONN_OUTREACH_SMTP_ANNA"] = json.dumps(
        {"conn_type": "smtp", "host": "127.0.0.1", "port": free_port(),
         "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 2, "retry_limit": 0}})
    env["AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY"] = "0"  # the task's retries, without waiting
    env.update(OUTREACH_SEND_PARALLELISM="1", OUTREACH_BATCH_SIZE="200")  # one send_batch task
    result = run_dag(env, "outreach_send", tmp_path / "send.log")
    log = result.log.read_text()
    assert result.state == "failed", log[-4000:]
    assert "MailboxUnreachable" in log
    assert "Airflow connection 'outreach_smtp_anna' failed at CONNECT: ConnectionRefusedError" in log
    assert "Errno 111" in log
    # summary turns the run red; after_send still succeeds, so its asset events are recorded.
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db") as meta:
        states = dict(meta.execute("SELECT task_id, state FROM task_instance WHERE task_id IN"
                                   " ('plan', 'summary', 'after_send')").fetchall())
        sent_events = meta.execute("SELECT e.source_task_id FROM asset_event e JOIN asset a ON"
                                   " a.id = e.asset_id WHERE a.uri = 'outreach://events/sent'"
                                   ).fetchall()
    assert states == {"plan": "success", "summary": "failed", "after_send": "success"}
    assert sent_events == [("after_send",)]
    by_mailbox = {(r["mailbox_id"], r["status"], r["attempts"]): r["n"] for r in rows(
        db_url, "SELECT mailbox_id, status::text AS status, attempts, count(*) AS n"
                " FROM outreach.emails GROUP BY 1, 2, 3")}
    assert by_mailbox == {(1, "queued", 0): EXPECTED_LEADS // 2, (2, "sent", 1): EXPECTED_LEADS // 2}
    invariants.assert_ok(db_url, sink.messages())


def test_operator_requeues_exhausted_emails_through_the_dag(db_url, sink, migrated_airflow_home, tmp_path,
                                                            shared_airflow):
    """The outreach_requeue form (issue 12.6c): not-accepted failures back in the queue, who and
    why recorded; an unconfirmed row asked for by id is skipped."""
    import psycopg

    import_demo(db_url)
    queue_due(db_url)
    with psycopg.connect(db_url) as c:
        ids = [r[0] for r in c.execute("SELECT id FROM outreach.emails ORDER BY id LIMIT 3")]
        c.execute("UPDATE outreach.emails SET status = 'failed', failure_kind = 'retries_exhausted',"
                  " attempts = 3, last_error = 'RCPT 452 4.2.2 Mailbox full' WHERE id = ANY(%s)", (ids[:2],))
        c.execute("UPDATE outreach.emails SET status = 'failed', failure_kind = 'unconfirmed',"
                  " attempts = 1 WHERE id = %s", (ids[2],))
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    conf = {"failed_kind": "retries_exhausted", "email_ids": ids, "requested_by": "Dana (ops)",
            "reason": "relay fixed", "campaign_key": None, "mailbox": None}
    result = shared_airflow.run_dag(env, "outreach_requeue", tmp_path / "requeue.log", conf=conf)
    assert result.ok, result.log.read_text()[-4000:]
    states = {r["id"]: (r["status"], r["failure_kind"], r["attempts"]) for r in rows(
        db_url, "SELECT id, status::text AS status, failure_kind, attempts FROM outreach.emails"
                " WHERE id = ANY(%s)", (ids,))}
    assert states == {ids[0]: ("queued", None, 0), ids[1]: ("queued", None, 0), ids[2]: ("failed", "unconfirmed", 1)}
    assert rows(db_url, "SELECT DISTINCT requeued_by, reason FROM outreach.email_requeues") == [
        {"requeued_by": "Dana (ops)", "reason": "relay fixed"}]
    assert f"skipped=1 [{ids[2]} (failed/unconfirmed)]" in result.log.read_text()


def test_webhooks_dag_posts_signed_events_with_the_secret_of_a_connection(
        db_url, sink, migrated_airflow_home, tmp_path, shared_airflow):
    """outreach_webhooks through real Airflow: the secret is the password of an Airflow
    connection (secret_ref conn:…), the loopback receiver verifies each post with the
    standardwebhooks library, and a second run posts nothing new."""
    import base64
    import os

    from outreach.webhooks import add_endpoint
    from support.webhookreceiver import Receiver

    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    receiver = Receiver(secret).start()
    try:
        add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["replied"],
                     secret_ref="conn:outreach_test_webhook", allow_private=True)
        ids = [r["id"] for r in rows(db_url, "INSERT INTO outreach.events (kind) VALUES"
                                             " ('replied'), ('sent'), ('replied') RETURNING id")]
        env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
        env["AIRFLOW_CONN_OUTREACH_TEST_WEBHOOK"] = json.dumps({"conn_type": "generic",
                                                                 "password": secret})
        env["OUTREACH_WEBHOOK_ALLOW_PRIVATE"] = "true"  # the receiver listens on loopback
        first = shared_airflow.run_dag(env, "outreach_webhooks", tmp_path / "webhooks-1.log")
        second = shared_airflow.run_dag(env, "outreach_webhooks", tmp_path / "webhooks-2.log")
    finally:
        receiver.stop()
    assert first.ok, first.log.read_text()[-4000:]
    assert second.ok, second.log.read_text()[-4000:]
    assert receiver.refused == []
    assert [m for m, _ in receiver.received] == [f"evt_{ids[0]}", f"evt_{ids[2]}"]
    assert secret not in first.log.read_text() and receiver.url not in first.log.read_text()
