"""Operators resolve unconfirmed emails: only a person who checked Sent Items can say.

"was sent" records the message in the send log as operator-confirmed (the Message-ID derived from
the row's idempotency key) and marks the row sent. When the server accepted the message after the
reaper had failed it (a late acceptance, recorded on the row by the sender), that evidence is
shown by ``outreach unconfirmed`` and kept with the resolution and in the send log's reply. "not sent" requeues it with the same
idempotency key, so the next attempt carries the same Message-ID. Nothing else may move an
unconfirmed row: a trigger (migration 0002) refuses it outside an operator resolution.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from outreach import db
from outreach.logutil import log, mask
from outreach.message import message_id_for

DECISIONS = ("was_sent", "not_sent")


@dataclass
class Resolution:
    """What a resolution did: ``resolved`` ids, ``skipped`` ids (no longer unconfirmed)."""

    decision: str
    resolved: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)

    def line(self) -> str:
        """Return the one-line summary for logs."""
        return (f"resolve {self.decision}: resolved={len(self.resolved)} {self.resolved} "
                f"skipped={len(self.skipped)} {self.skipped}")


def evidence(row: dict[str, Any]) -> str | None:
    """Return what the database knows about an unconfirmed row besides Sent Items, as one line:
    the server's late acceptance (``accepted late at 2026-03-08 10:31:05 UTC: 250 2.0.0 OK
    queued; Message-ID <…>``), or ``None``.

    :param row: a row of ``email_list_unconfirmed``.
    """
    if not row.get("late_accepted_at"):
        return None
    at = row["late_accepted_at"].astimezone(dt.timezone.utc)
    return (f"accepted late at {at:%Y-%m-%d %H:%M:%S} UTC: {row['late_accept_reply']}; "
            f"Message-ID <{row['late_accept_message_id']}>")


def describe_unconfirmed(row: dict[str, Any]) -> str:
    """Return the operator's one line about an unconfirmed email (recipient masked): id,
    campaign (or message class), mailbox, claim, handoff, why, and the evidence if any. The CLI
    (``outreach unconfirmed``) and the ``outreach_resolve_unconfirmed`` DAG's log show this.

    :param row: a row of ``email_list_unconfirmed``.
    """
    def utc(t: dt.datetime | None) -> str:
        return f"{t.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC" if t else "never"

    seen = evidence(row)
    return (f"email {row['id']}  {row['campaign_key'] or row['message_class']}  mailbox "
            f"{row['mailbox_id']}  to {mask(row['email'])}  claimed {utc(row['claimed_at'])} by "
            f"{row['claimed_by']}  handed over {utc(row['handed_over_at'])}  - {row['last_error']}"
            + (f"  EVIDENCE: {seen}" if seen else ""))


def list_unconfirmed(url: str, *, ids: list[int] | None = None, campaign_key: str | None = None,
                     mailbox: str | None = None) -> list[dict[str, Any]]:
    """Return unconfirmed emails selected by ids, or by campaign key and/or mailbox (address or id)."""
    with db.connect(url, autocommit=True) as conn:
        return db.run(conn, "email_list_unconfirmed", {"ids": ids, "campaign_key": campaign_key,
                                                       "mailbox": mailbox})


def resolve(url: str, decision: str, resolved_by: str, *, ids: list[int] | None = None,
            campaign_key: str | None = None, mailbox: str | None = None, note: str = "",
            ) -> Resolution:
    """Resolve unconfirmed emails, one transaction per email (a guarded UPDATE each).

    :param decision: ``"was_sent"`` or ``"not_sent"``.
    :param resolved_by: the person deciding (recorded).
    :param ids: email ids; or select by ``campaign_key`` and/or ``mailbox``.
    :raises ValueError: unknown decision, no operator name, or no selection at all.
    """
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, got {decision!r}")
    if not resolved_by.strip():
        raise ValueError("say who decides (resolved_by)")
    if not ids and not campaign_key and not mailbox:
        raise ValueError("select emails by ids, or by campaign and/or mailbox")
    result = Resolution(decision)
    rows = list_unconfirmed(url, ids=ids, campaign_key=campaign_key, mailbox=mailbox)
    found = {r["id"] for r in rows}
    result.skipped.extend(i for i in (ids or []) if i not in found)
    conn = db.connect(url)
    try:
        for r in rows:
            seen = evidence(r)
            with conn.transaction():
                db.run(conn, "resolution_begin")
                if decision == "was_sent":
                    reply = f"operator {resolved_by}: {note}".strip().rstrip(":")
                    done = db.run(conn, "email_resolve_was_sent", {
                        "email_id": r["id"], "note": reply + (f" ({seen})" if seen else ""),
                        "message_id": message_id_for(str(r["idempotency_key"]), r["mailbox_address"])})
                else:
                    done = db.run(conn, "email_resolve_not_sent", {"email_id": r["id"], "note": note})
                if done:
                    db.run(conn, "resolution_insert", {"email_id": r["id"], "decision": decision,
                                                       "resolved_by": resolved_by, "note": note,
                                                       "evidence": seen})
                    result.resolved.append(r["id"])
                    log.info("email %s (%s) resolved as %s by %s%s", r["id"], mask(r["email"]),
                             decision, resolved_by, f"; evidence: {seen}" if seen else "")
                else:
                    result.skipped.append(r["id"])
    finally:
        conn.close()
    log.info(result.line())
    return result
