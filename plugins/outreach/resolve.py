"""Operators resolve unconfirmed emails: only a person who checked Sent Items can say.

"was sent" records the message in the send log as operator-confirmed (the Message-ID derived from
the row's idempotency key) and marks the row sent. "not sent" requeues it with the same
idempotency key, so the next attempt carries the same Message-ID. Nothing else may move an
unconfirmed row: a trigger (migration 0002) refuses it outside an operator resolution.
"""

from __future__ import annotations

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
            with conn.transaction():
                db.run(conn, "resolution_begin")
                if decision == "was_sent":
                    done = db.run(conn, "email_resolve_was_sent", {
                        "email_id": r["id"], "note": f"operator {resolved_by}: {note}".strip(),
                        "message_id": message_id_for(str(r["idempotency_key"]), r["mailbox_address"])})
                else:
                    done = db.run(conn, "email_resolve_not_sent", {"email_id": r["id"], "note": note})
                if done:
                    db.run(conn, "resolution_insert", {"email_id": r["id"], "decision": decision,
                                                       "resolved_by": resolved_by, "note": note})
                    result.resolved.append(r["id"])
                    log.info("email %s (%s) resolved as %s by %s", r["id"], mask(r["email"]),
                             decision, resolved_by)
                else:
                    result.skipped.append(r["id"])
    finally:
        conn.close()
    log.info(result.line())
    return result
