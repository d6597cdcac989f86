"""An interrupt (SIGTERM → SystemExit in the CLI, or Airflow's task kill) that lands between two
rows of a batch: the next row was never handed off, so it goes back to the queue; the previous
row's outcome is never applied to it (found by an adversarial review)."""
import inspect
import sys

import psycopg
import pytest

from conftest import CAMPAIGN, MAILBOXES, SMTP_CONN_IDS
from faultsmtp import FaultSMTPServer
from flow import rows
from outreach.airflow_adapter import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due
import outreach.send as send_mod


def _interrupt_at_row_boundary():
    src, start = inspect.getsourcelines(send_mod.send_batch)
    for_line = start + next(i for i, l in enumerate(src) if l.strip() == "for row in rows:")

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == for_line:
            p = frame.f_locals.get("progress")
            if p is not None and p.done == 1:
                sys.settrace(None)
                raise SystemExit(143)  # what cli.py's SIGTERM handler raises
        return local

    def glob(frame, event, arg):
        if frame.f_code is send_mod.send_batch.__code__:
            return local
        return None
    return glob


@pytest.mark.parametrize("first_action", ["rcpt_550", "accept"])
def test_interrupt_between_rows(db_url, tmp_path, monkeypatch, settings, first_action):
    p = tmp_path / "l.csv"
    p.write_text("Email,First Name,Company\nfirst@ex.example,A,A\nsecond@ex.example,B,B\n")
    import_leads(db_url, CAMPAIGN, MAILBOXES, p)
    with psycopg.connect(db_url) as c:
        c.execute("UPDATE outreach.enrollments SET mailbox_id = 1")
        c.execute("UPDATE outreach.mailboxes SET daily_cap = 1000, warmup_start = NULL")
    queue_due(db_url)
    with FaultSMTPServer({"first@ex.example": [first_action], "second@ex.example": ["accept"]}) as smtp:
        for cid in SMTP_CONN_IDS:
            monkeypatch.setenv(f"AIRFLOW_CONN_{cid.upper()}", smtp.connection_json())
        sys.settrace(_interrupt_at_row_boundary())
        try:
            with pytest.raises(SystemExit):
                send_mod.send_batch(db_url, 1, 10, smtp_connector, settings, worker="w")
        finally:
            sys.settrace(None)
        got = [m["To"] for m in smtp.messages()]
    state = rows(db_url, "SELECT l.email, e.status::text, e.failure_kind, e.last_error FROM outreach.emails e "
                         "JOIN outreach.leads l ON l.id = e.lead_id ORDER BY e.id")
    sup = rows(db_url, "SELECT value, reason::text FROM outreach.suppressions")
    second = next(s for s in state if s["email"] == "second@ex.example")
    # expected: the second row was never handed off -> released back to 'queued'
    assert second["status"] == "queued", (got, state, sup)
