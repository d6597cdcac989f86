"""The daily cap's counter (outreach.mailbox_claim_counts, migration 0081) always equals what it
replaces: the rows of each mailbox claimed in each quarter-hour that are sending, sent or
unconfirmed, whatever changed them — the claim and the named transitions, or SQL by hand."""

from __future__ import annotations

import datetime as dt

from outreach import db
from outreach.claim import claim
from outreach.queue import queue_due
from support.claimcounts import COUNTED, KEPT
from support.flow import import_demo

NOW = dt.datetime(2026, 3, 4, 10, 7, tzinfo=dt.UTC)



def _same(conn) -> None:
    counted = {(r["mailbox_id"], r["quarter"]): r["claimed"] for r in conn.execute(COUNTED)}
    kept = {(r["mailbox_id"], r["quarter"]): r["claimed"] for r in conn.execute(KEPT)}
    assert kept == counted
    for (mailbox, _), _n in counted.items():  # the cap's figure, as the claim reads it
        used = db.run(conn, "mailbox_remaining_today", {
            "mailbox_id": mailbox, "now": NOW, "interval": None, "gap_seconds": 0.0,
            "gap_jitter": 0.0, "horizon": dt.timedelta(minutes=15)})[0]["used"]
        day = conn.execute(
            "SELECT count(*)::integer AS n FROM outreach.emails e JOIN outreach.mailboxes m"
            " ON m.id = e.mailbox_id WHERE e.mailbox_id = %s AND e.claimed_at >="
            " date_trunc('day', %s::timestamptz AT TIME ZONE m.timezone) AT TIME ZONE m.timezone"
            " AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')",
            (mailbox, NOW)).fetchone()["n"]
        assert used == day


def test_the_cap_counter_follows_every_change_of_the_rows(db_url):
    import_demo(db_url, now=NOW - dt.timedelta(days=1))
    queue_due(db_url, now=NOW - dt.timedelta(hours=1))
    with db.connect(db_url, autocommit=True) as conn:
        mailbox = conn.execute("SELECT mailbox_id FROM outreach.emails LIMIT 1").fetchone()["mailbox_id"]
        rows, _ = claim(conn, mailbox, 12, worker="t", now=NOW)
        assert len(rows) == 12
        _same(conn)
        ids = [r["id"] for r in rows]
        token = {r["id"]: r["claim_token"] for r in rows}

        def p(i: int) -> dict:
            return {"email_id": ids[i], "claim_token": token[ids[i]], "now": NOW}

        db.run(conn, "email_mark_sent", {**p(0), "message_id": "<a@x>", "smtp_reply": "250",
                                         "subject": None, "content_version": None})
        db.run(conn, "email_mark_retry", {**p(1), "max_attempts": 5, "error": "451",
                                          "retry_after": dt.timedelta(minutes=5)})
        db.run(conn, "email_mark_retry", {**p(2), "max_attempts": 1, "error": "451",
                                          "retry_after": dt.timedelta(minutes=5)})
        db.run(conn, "email_mark_failed", {**p(3), "failure_kind": "permanent", "error": "550"})
        db.run(conn, "email_mark_failed", {**p(4), "failure_kind": "unconfirmed", "error": "?"})
        db.run(conn, "email_mark_suppressed", p(5))
        db.run(conn, "email_release_claimed", {"ids": [ids[6]], "claim_token": token[ids[6]],
                                               "error": None})
        _same(conn)
        # The handoff stamp moves claimed_at into the next quarter-hour (and next local day).
        conn.execute("UPDATE outreach.emails SET claimed_at = claimed_at + interval '20 minutes',"
                     " handed_over_at = claimed_at + interval '20 minutes' WHERE id = ANY(%s)",
                     (ids[7:9],))
        _same(conn)
        db.run(conn, "email_reap_stale", {"now": NOW + dt.timedelta(hours=2),
                                          "threshold": dt.timedelta(minutes=30),
                                          "release": dt.timedelta(minutes=2)})
        _same(conn)
        conn.execute("SET outreach.resolution = 'operator'")
        db.run(conn, "email_resolve_not_sent", {"email_id": ids[4], "note": "checked"})
        _same(conn)
        # By hand: a row inserted as sent today, a row moved to another mailbox, a row deleted,
        # and the mailbox's time zone changed (the counter's quarter-hours are UTC).
        other = conn.execute("SELECT id FROM outreach.mailboxes WHERE id <> %s LIMIT 1",
                             (mailbox,)).fetchone()["id"]
        conn.execute("UPDATE outreach.emails SET status = 'sent', claimed_at = %s, sent_at = %s"
                     " WHERE id = (SELECT max(id) FROM outreach.emails WHERE status = 'queued')",
                     (NOW - dt.timedelta(minutes=50), NOW))
        conn.execute("UPDATE outreach.emails SET status = 'sent', claimed_at = %s, sent_at = %s"
                     " WHERE id = (SELECT min(id) FROM outreach.emails WHERE status = 'queued'"
                     " AND mailbox_id = %s)", (NOW - dt.timedelta(hours=20), NOW, mailbox))
        conn.execute("UPDATE outreach.emails SET mailbox_id = %s WHERE id = %s", (other, ids[0]))
        conn.execute("DELETE FROM outreach.send_log WHERE email_id = %s", (ids[0],))
        conn.execute("DELETE FROM outreach.emails WHERE id = %s", (ids[0],))
        conn.execute("UPDATE outreach.mailboxes SET timezone = 'Asia/Kolkata' WHERE id = %s",
                     (mailbox,))
        _same(conn)
        conn.execute("TRUNCATE outreach.emails CASCADE")
        assert conn.execute(KEPT).fetchall() == []
