"""Pausing and resuming a mailbox, with who, when and why.

Each is one guarded UPDATE writing its ``outreach.mailbox_events`` row; a paused mailbox is
never claimed (:func:`outreach.claim.claim`), a resumed one keeps its cap and pacing.
Automatic pauses come from :mod:`outreach.health`; only an operator resumes."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from outreach import audit, db
from outreach.logutil import log, mask
from outreach.store import Conn
from outreach.store import mailboxes as store


class MailboxNotFound(ValueError):
    """No mailbox has the given id or address."""


@dataclass(frozen=True)
class StatusChange:
    """The outcome of a pause or resume: ``mailbox_id``, ``mailbox`` (masked address),
    ``changed`` (False when the mailbox already had that status), ``status`` after the call
    (``active``/``paused``) and ``at`` (UTC) when it changed."""

    mailbox_id: int
    mailbox: str
    changed: bool
    status: str
    at: dt.datetime | None = None

    def line(self) -> str:
        """Return a one-line description for logs and the CLI."""
        what = {"paused": "paused", "active": "resumed"}[self.status]
        if self.changed:
            return f"mailbox {self.mailbox_id} ({self.mailbox}) {what}"
        return f"mailbox {self.mailbox_id} ({self.mailbox}) was already {self.status}; nothing changed"


def find_mailbox(conn: Conn, mailbox: str | int) -> store.Mailbox:
    """Return the mailbox row for an id (``3``, ``"3"``) or an address (case-insensitive).

    :raises MailboxNotFound: no such mailbox.
    """
    text = str(mailbox).strip()
    row = (store.mailbox_find(conn, mailbox_id=int(text), address=None) if text.isdigit()
           else store.mailbox_find(conn, mailbox_id=None, address=text))
    if row is None:
        raise MailboxNotFound(f"no mailbox {mask(text) if '@' in text else text!r}")
    return row


def required(value: str, what: str) -> str:
    """Return ``value`` stripped: the rule of every operator action (a mailbox or campaign pause
    or resume, a lead stop) that who did it and why are recorded.

    :raises ValueError: ``value`` is empty or blank (``"{what} is required"``).
    """
    value = (value or "").strip()
    if not value:
        raise ValueError(f"{what} is required")
    return value


def pause(conn: Conn, mailbox_id: int, reason: str, by: str, *,
          now: dt.datetime | None = None) -> dt.datetime | None:
    """Pause one active mailbox inside the caller's transaction.

    :param reason: recorded with the pause (for automatic pauses: the figure and its date).
    :param by: who pauses (an operator, or ``postmaster`` / ``bounce-rate``).
    :returns: when it was paused, or ``None`` when it was not active (nothing changed).
    """
    done = store.mailbox_pause(conn, mailbox_id=mailbox_id, reason=reason, by=by, now=now)
    return done[0].created_at if done else None


def pause_mailbox(url: str, mailbox: str | int, reason: str, by: str, *,
                  now: dt.datetime | None = None, who: audit.Who | None = None) -> StatusChange:
    """Pause a mailbox (by id or address) until an operator resumes it; pausing twice keeps the first reason.

    :param who: who is authenticated (default ``by`` through ``api``): an audit row for a change.
    :raises MailboxNotFound: no such mailbox.
    :raises ValueError: ``reason`` or ``by`` is empty."""
    reason, by = required(reason, "a reason"), required(by, "who pauses (--by)")
    with db.transaction(url) as conn:
        row = find_mailbox(conn, mailbox)
        at = pause(conn, row.id, reason, by, now=now)
        if at is not None:
            _audit(conn, who, by, "pause", row, reason)
    change = StatusChange(row.id, mask(row.address), at is not None, "paused", at)
    log.warning("%s by %s: %s", change.line(), by, reason)
    return change


def resume_mailbox(url: str, mailbox: str | int, by: str, why: str, *,
                   now: dt.datetime | None = None, who: audit.Who | None = None) -> StatusChange:
    """Resume a paused mailbox (by id or address), recording who and why; cap and pacing still apply.

    :param who: as for :func:`pause_mailbox`.
    :raises MailboxNotFound: no such mailbox.
    :raises ValueError: ``by`` or ``why`` is empty."""
    by, why = required(by, "who resumes (--by)"), required(why, "why (--reason)")
    with db.transaction(url) as conn:
        row = find_mailbox(conn, mailbox)
        done = store.mailbox_resume(conn, mailbox_id=row.id, by=by, why=why, now=now)
        if done:
            _audit(conn, who, by, "resume", row, why)
    change = StatusChange(row.id, mask(row.address), bool(done), "active",
                          done[0].created_at if done else None)
    log.warning("%s by %s: %s", change.line(), by, why)
    return change


def _audit(conn: Conn, who: audit.Who | None, by: str, action: str, row: store.Mailbox,
           reason: str) -> None:
    """Record a mailbox's pause or resume in the audit trail (masked address), in its
    transaction."""
    audit.record_as(conn, who or audit.Who(by), by=by, action=action, target_kind="mailbox",
                    target_key=mask(row.address), target_id=row.id, reason=reason)


def mailbox_events(url: str, mailbox: str | int | None = None) -> list[dict[str, Any]]:
    """Return the pause/resume history, newest first: ``{id, mailbox_id, address (masked),
    event ('paused'/'resumed'), actor, reason, created_at (UTC)}`` for one mailbox or all.

    :raises MailboxNotFound: no such mailbox.
    """
    with db.connect(url, autocommit=True) as conn:
        mailbox_id = find_mailbox(conn, mailbox).id if mailbox is not None else None
        rows = store.mailbox_event_list(conn, mailbox_id=mailbox_id)
    return [{**asdict(r), "address": mask(r.address)} for r in rows]
