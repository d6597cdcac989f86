"""The ledger statement (email_mark_sent) commits without waiting for the WAL flush, and only
its own transaction does: the handoff stamp that follows it on the same connection must stay a
synchronous commit (a stamp lost in a crash would let the reaper put a message that went out
back in the queue). Real PostgreSQL, the sender's own claim, stamp and ledger statements."""

from __future__ import annotations

from outreach import db
from outreach.claim import claim
from outreach.queue import queue_due
from outreach.store import emails
from support.flow import import_demo


def _setting(conn) -> str:
    return conn.execute("SELECT current_setting('synchronous_commit') AS s").fetchone()["s"]


def test_the_ledger_commits_asynchronously_and_the_next_stamp_does_not(db_url):
    import_demo(db_url)
    queue_due(db_url)
    with db.connect(db_url, autocommit=True) as conn:
        first, second = claim(conn, 1, 2, worker="test")[0]
        for row in (first, second):
            assert emails.email_touch_claim(conn, email_id=row["id"], claim_token=row["claim_token"],
                                            now=None, address=row["email"])
        assert _setting(conn) == "on"
        with conn.transaction():  # the statement's own transaction, made visible
            assert emails.email_mark_sent(conn, now=None, email_id=first["id"],
                                          claim_token=first["claim_token"], message_id="a@x",
                                          smtp_reply="250 ok", subject="s")
            assert _setting(conn) == "off"
        assert _setting(conn) == "on"  # what the next stamp commits with
        assert emails.email_mark_sent(conn, now=None, email_id=second["id"],
                                      claim_token=second["claim_token"], message_id="b@x",
                                      smtp_reply="250 ok", subject="s")  # autocommit, as sent
        assert _setting(conn) == "on"
        sent = conn.execute("SELECT count(*) AS n FROM outreach.send_log").fetchone()["n"]
        assert sent == 2
