"""SIGTERM (SystemExit via cli.py) right after the claim committed, before any handoff: the
claimed rows go back to the queue instead of waiting for the reaper to fail them as unconfirmed
(found by an adversarial review)."""
import datetime as dt
import psycopg
import pytest

from conftest import CAMPAIGN, MAILBOXES
from flow import rows
from outreach.airflow_adapter import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due, reap
import outreach.send as send_mod


def test_interrupt_right_after_claim(db_url, sink, settings, tmp_path, monkeypatch):
    p = tmp_path / "l.csv"
    p.write_text("Email,First Name,Company\na@ex.example,A,A\nb@ex.example,B,B\n")
    import_leads(db_url, CAMPAIGN, MAILBOXES, p)
    with psycopg.connect(db_url) as c:
        c.execute("UPDATE outreach.enrollments SET mailbox_id = 1")
    queue_due(db_url)
    real_one = send_mod.db.one

    def one(conn, name, params=None):
        if name == "mailbox_by_id":
            raise SystemExit(143)  # SIGTERM lands during this round trip
        return real_one(conn, name, params)

    monkeypatch.setattr(send_mod.db, "one", one)
    with pytest.raises(SystemExit):
        send_mod.send_batch(db_url, 1, 10, smtp_connector, settings, worker="w")
    monkeypatch.setattr(send_mod.db, "one", real_one)
    reap(db_url, settings.reaper_threshold, now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2))
    st = rows(db_url, "SELECT status::text AS s, failure_kind FROM outreach.emails ORDER BY id")
    assert sink.messages() == []
    assert all(r["s"] == "queued" for r in st), st
