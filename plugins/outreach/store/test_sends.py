"""Typed calls of ``sql/queries/test_sends.sql``, one function per query, named like it.

Test sends: a campaign step rendered for a lead and sent to a seed address through the real
mailbox; recorded apart from the send log, counted toward the mailbox's daily cap.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from outreach.store._run import Conn, one


@dataclass(frozen=True, slots=True)
class TestSendStamp:
    """A row of ``test_send_record`` (columns as the query names them)."""

    __test__ = False  # not a pytest class
    id: int
    accepted_at: dt.datetime


def test_send_record(
    conn: Conn, *, step_id: int, lead_id: int, mailbox_id: int, recipient: str, message_id: str,
    smtp_reply: str, actor: str, now: dt.datetime | None,
) -> TestSendStamp:
    """``test_send_record``: Only after the SMTP server accepted the message: its one entry (its
    own Message-ID, UNIQUE).

    :raises RowMissing: the statement returned no row (no such step)."""
    return one(conn, "test_send_record",
               {"step_id": step_id, "lead_id": lead_id, "mailbox_id": mailbox_id,
                "recipient": recipient, "message_id": message_id, "smtp_reply": smtp_reply,
                "actor": actor, "now": now}, TestSendStamp)
