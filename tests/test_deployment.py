"""The real scheduler: api-server, scheduler, dag-processor and triggerer (LocalExecutor,
PostgreSQL metadata) run import → queue → send on the sample data; then a successful and a failed
send task instance are cleared through the REST API and re-run. Nothing is sent twice, nothing is
lost, and no process is left behind."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import psutil
import psycopg
import pytest

import invariants
from flow import rows
from outreach import embedded
from outreach.deploy import Deployment, sqlalchemy_url
from outreach.queue import reap

pytestmark = pytest.mark.airflow

DAGS = ("outreach_import_leads", "outreach_queue_due", "outreach_send")
FINAL = {"success", "failed"}

# While this trigger exists, recording a sent email of mailbox 2 fails: the SMTP server has taken
# the message but the send log cannot be written, so the task fails (and is retried, and fails).
BREAK_LEDGER = """
CREATE FUNCTION outreach.test_break_ledger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'injected: send log unavailable'; END $$;
CREATE TRIGGER test_break_ledger BEFORE INSERT ON outreach.send_log
FOR EACH ROW WHEN (NEW.mailbox_id = 2) EXECUTE FUNCTION outreach.test_break_ledger();
"""
MEND_LEDGER = "DROP TRIGGER test_break_ledger ON outreach.send_log; DROP FUNCTION outreach.test_break_ledger();"


@pytest.fixture
def deployment(pg_admin_url, db_url, sink, tmp_path):
    meta = f"airflow_meta_{uuid.uuid4().hex[:8]}"
    meta_url = embedded.ensure_database(pg_admin_url, meta)
    conn_json = sink.connection_json()
    dep = Deployment(home=tmp_path / "airflow", metadata_url=sqlalchemy_url(meta_url), outreach_url=db_url,
                     env_extra={"AIRFLOW_CONN_OUTREACH_SMTP_ANNA": conn_json,
                                "AIRFLOW_CONN_OUTREACH_SMTP_BEN": conn_json,
                                "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                                "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                                "OUTREACH_BATCH_SIZE": "25",
                                "OUTREACH_SEND_INTERVAL_MINUTES": "0",
                                "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
                                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"})
    dep.migrate()
    dep.start()
    try:
        dep.wait_ready()
        yield dep
    finally:
        pids = [p.pid for p in dep.procs.values()]
        dep.stop()
        time.sleep(1)
        left = [p for p in psutil.process_iter(["pid", "cmdline", "environ"])
                if p.info["environ"] and p.info["environ"].get("AIRFLOW_HOME") == str(dep.home)]
        assert not left, f"processes left behind: {[p.info['cmdline'] for p in left]} (started {pids})"
        with psycopg.connect(pg_admin_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{meta}" WITH (FORCE)')


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_and_wait(dep: Deployment, token: str, dag_id: str, timeout: float = 300) -> dict:
    run = dep.api("POST", f"/dags/{dag_id}/dagRuns", token, json={"logical_date": None, "conf": {}})
    run_id = run["dag_run_id"]
    return wait_for(lambda: (r := dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}", token))["state"] in FINAL and r,
                    timeout, f"{dag_id} run {run_id}")


def task_instances(dep, token, dag_id, run_id) -> list[dict]:
    return dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", token)["task_instances"]


def test_scheduler_runs_the_main_job_and_clearing_sends_nothing_twice(deployment, db_url, sink, tmp_path):
    dep = deployment
    token = dep.token()
    wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", token)["dags"]} >= set(DAGS), 180,
             "the dag-processor to parse the DAGs")
    for dag_id in DAGS:
        dep.api("PATCH", f"/dags/{dag_id}", token, json={"is_paused": False})

    assert run_and_wait(dep, token, "outreach_import_leads")["state"] == "success"
    assert run_and_wait(dep, token, "outreach_queue_due")["state"] == "success"
    with psycopg.connect(db_url) as c:
        c.execute(BREAK_LEDGER)
    send = run_and_wait(dep, token, "outreach_send")
    assert send["state"] == "failed"  # mailbox 2's batches could not record what they sent
    tis = [t for t in task_instances(dep, token, "outreach_send", send["dag_run_id"]) if t["task_id"] == "send_batch"]
    ok = [t for t in tis if t["state"] == "success"]
    failed = [t for t in tis if t["state"] == "failed"]
    assert ok and failed and all(t["try_number"] == 3 for t in failed)  # retried twice, failed each time
    sent_before = len(sink.messages())

    # Clear a successful send task: its re-run claims fresh rows or none, and sends nothing twice.
    with psycopg.connect(db_url) as c:
        c.execute(MEND_LEDGER)
    target = ok[0]
    dep.api("POST", "/dags/outreach_send/clearTaskInstances", token, json={
        "dag_run_id": send["dag_run_id"], "task_ids": [["send_batch", target["map_index"]]],
        "only_failed": False, "dry_run": False, "reset_dag_runs": True})
    wait_for(lambda: next(t for t in task_instances(dep, token, "outreach_send", send["dag_run_id"])
                          if t["task_id"] == "send_batch" and t["map_index"] == target["map_index"]
                          )["try_number"] > target["try_number"] and
             dep.api("GET", f"/dags/outreach_send/dagRuns/{send['dag_run_id']}", token)["state"] in FINAL,
             300, "the cleared successful task to run again")
    assert len(sink.messages()) == sent_before  # its rows were all sent: the re-run found none
    ids = [m["Message-ID"] for m in sink.messages()]
    assert len(ids) == len(set(ids))

    # Clear the failed ones: with the ledger mended they send the rest.
    dep.api("POST", "/dags/outreach_send/clearTaskInstances", token, json={
        "dag_run_id": send["dag_run_id"], "task_ids": [["send_batch", t["map_index"]] for t in failed],
        "only_failed": True, "dry_run": False, "reset_dag_runs": True, "include_downstream": True})
    final = wait_for(lambda: (r := dep.api("GET", f"/dags/outreach_send/dagRuns/{send['dag_run_id']}", token))
                     ["state"] in FINAL and r, 300, "the cleared failed tasks to finish")
    states = [(t["task_id"], t["map_index"], t["state"], t["try_number"])
              for t in task_instances(dep, token, "outreach_send", send["dag_run_id"])]
    assert final["state"] == "success", states

    # The messages the server took while the ledger was broken are 'sending'; the reaper makes
    # them unconfirmed for a person to decide. Everything else was sent exactly once.
    stuck = rows(db_url, "SELECT id FROM outreach.emails WHERE status = 'sending'")
    assert len(stuck) == len(failed) * 3  # one handed-off row per failed try
    reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=31))
    messages = sink.messages()
    totals = invariants.assert_ok(db_url, messages)
    assert totals.unconfirmed == len(stuck)
    assert totals.sent_rows + totals.unconfirmed == len(messages) == 196
    assert len(messages) >= sent_before
