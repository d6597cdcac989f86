"""An interrupt while the SMTP session is still connecting (before MAIL FROM, nothing sent): the
row goes back to the queue; only an interrupt after the 354 go-ahead makes it unconfirmed (found
by an adversarial review)."""
import psycopg
import pytest

from conftest import CAMPAIGN, MAILBOXES
from flow import rows
from outreach.leads import import_leads
from outreach.queue import queue_due
import outreach.send as send_mod


def test_interrupt_while_connecting(db_url, settings, tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("Email,First Name,Company\na@ex.example,A,A\n")
    import_leads(db_url, CAMPAIGN, MAILBOXES, p)
    with psycopg.connect(db_url) as c:
        c.execute("UPDATE outreach.enrollments SET mailbox_id = 1")
    queue_due(db_url)

    def connector(conn_id):
        raise KeyboardInterrupt  # Ctrl-C / SIGTERM while the TCP connect or greeting is pending

    with pytest.raises(KeyboardInterrupt):
        send_mod.send_batch(db_url, 1, 10, connector, settings, worker="w")
    st = rows(db_url, "SELECT status::text AS s, failure_kind FROM outreach.emails")
    assert st == [{"s": "queued", "failure_kind": None}], st
