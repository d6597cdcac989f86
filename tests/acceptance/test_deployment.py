"""The real scheduler: api-server, scheduler, dag-processor and triggerer (LocalExecutor,
PostgreSQL metadata) run import → queue → send on the sample data; then a successful and a failed
send task instance are cleared through the REST API and re-run. Nothing is sent twice and
nothing is lost. In the deployment the operator tests share (``local_deployment``), which checks
when it stops that no process is left behind."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from outreach.campaign import sync_mailboxes
from outreach.queue import reap
from support import invariants
from support.deployment import (
    accepted_once,
    clear_and_wait,
    run_and_wait,
    send_tis,
    trigger,
    wait_for,
    wait_run,
)
from support.flow import rows
from support.paths import MAILBOXES

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
