"""A live sender's claim released early (``OUTREACH_RELEASE_SECONDS``, 30 s in the Celery
tests: its heartbeat late on a busy machine) and claimed by another live sender: the first
sender's guarded handoff stamp refuses every row it lost, the new owner hands them over, and
each lead gets its email once. Real PostgreSQL, real aiosmtpd; the release and the new claim
happen mid-batch, while the first sender waits for the server's reply to one of its messages."""

from __future__ import annotations

import datetime as dt

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.claim import claim
from outreach.compose import _KeyCache
from outreach.handoff import _send_one
from outreach.leads import import_leads
from outreach.queue import queue_due, reap
from outreach.record import BatchSummary, _Progress
from outreach.send import send_batch
from outreach.transport import SmtpSession
from support import invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import leads_csv, one_mailbox, point_mailboxes_at, rows
from support.paths import CAMPAIGN, MAILBOXES


def hand_over_claimed(url: str, claimed: list[dict], settings) -> BatchSummary:
    """The second sender's handoffs of the rows it claimed (the send path's own per-row step)."""
    summary = BatchSummary(mailbox_id=claimed[0]["mailbox_id"], mailbox="second",
                           claimed=len(claimed))
    session = SmtpSession(lambda: smtp_connector(claimed[0]["smtp_conn_id"]), settings.smtp_timeout)
    conn = db.connect(url, autocommit=True)
    try:
        for row in claimed:
            _send_one(conn, session, row, settings, summary, None, _KeyCache(None), _Progress())
    finally:
        session.close()
        conn.close()
    return summary


def test_a_live_claim_released_early_is_sent_once_by_its_new_owner(db_url, settings, tmp_path,
                                                                   monkeypatch):
    leads = [f"early{i}@release.example" for i in range(6)]
    settings = settings.replace(smtp_timeout=30, release_seconds=30)  # as the Celery tests
    seen: dict = {}

    def release_and_claim(_n: int) -> None:
        # The first sender has sent row 1 and handed over row 2 (the server holds its reply):
        # the reaper, the first sender's heartbeat looking older than the release, requeues
        # rows 3-6, and a second sender claims them.
        later = dt.datetime.now(dt.UTC) + settings.release_threshold + dt.timedelta(seconds=5)
        seen["released"] = reap(db_url, settings.reaper_threshold,
                                release=settings.release_threshold, now=later)
        with db.connect(db_url, autocommit=True) as conn:
            seen["claimed"] = claim(conn, 1, 100, worker="second")[0]

    with FaultSMTPServer(nth={2: "hook"}, on_message=release_and_claim) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=30))
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, leads))
        one_mailbox(db_url)
        assert queue_due(db_url)["queued"] == 6
        first = send_batch(db_url, 1, 100, smtp_connector, settings, worker="first")
        second = hand_over_claimed(db_url, seen["claimed"], settings)
        messages = smtp.messages()

    assert len(seen["released"].requeued) == 4 and not seen["released"].unconfirmed
    assert len(seen["claimed"]) == 4
    assert (first.claimed, first.sent, first.lost_claims) == (6, 2, 4), first.line()
    assert (second.sent, second.lost_claims) == (4, 0), second.line()
    invariants.assert_ok(db_url, messages)
    assert sorted(m["X-RcptTo"] for m in messages) == sorted(leads)  # each lead once
    assert {(r["status"], r["n"]) for r in rows(
        db_url, "SELECT status::text AS status, count(*) AS n FROM outreach.emails GROUP BY 1")} == {
        ("sent", 6)}
