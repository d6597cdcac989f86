"""Sending: claim a batch, re-check suppression, render, hand off, record — row by row.

Each row's outcome is committed right after its own handoff, never at the end of the batch, and
every change of a claimed row is one guarded UPDATE (status = 'sending' and our claim token).
What happens when this runs twice: a second sender's claim skips locked rows and can only claim
rows still 'queued'; a retried task claims fresh rows or none, and rows an earlier try left in
'sending' are left to the reaper.
"""

from __future__ import annotations

import datetime as dt
import socket
import smtplib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from outreach import db
from outreach.feedback import feedback_id
from outreach.logutil import log, mask
from outreach.message import Envelope, MessageError, build_message, message_id_for, to_wire
from outreach.render import RenderError, render
from outreach.settings import Settings
from outreach.suppression import is_suppressed, suppress
from outreach.tokens import make_token
from outreach.transport import Outcome, SmtpSession

SmtpConnector = Callable[[str], smtplib.SMTP]
"""Given a mailbox's Airflow SMTP connection id, return a connected ``smtplib.SMTP``."""


@dataclass
class BatchSummary:
    """What one batch did, for the one summary line per batch and for XCom."""

    mailbox_id: int
    mailbox: str  # masked
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    unconfirmed: int = 0
    suppressed: int = 0
    lost_claims: int = 0
    note: str = ""
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        """Return the analyst-facing summary line."""
        text = (f"batch mailbox={self.mailbox_id} ({self.mailbox}) claimed={self.claimed} "
                f"sent={self.sent} retried={self.retried} failed={self.failed} "
                f"unconfirmed={self.unconfirmed} suppressed={self.suppressed}")
        if self.lost_claims:
            text += f" lost_claims={self.lost_claims}"
        return text + (f" note={self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return asdict(self)


def worker_name(label: str = "cli") -> str:
    """Return ``label@host:pid``, recorded as ``claimed_by``."""
    import os

    return f"{label}@{socket.gethostname()}:{os.getpid()}"


def claim(conn, mailbox_id: int, limit: int, *, worker: str, now: dt.datetime | None = None,
          interval: dt.timedelta | None = None) -> tuple[list[dict[str, Any]], str]:
    """Claim up to ``limit`` due rows of one mailbox within its quota, in one transaction.

    The mailbox row is locked first (``mailbox_lock``), so the counts that follow hold however
    many senders claim at once; then one claim statement takes at most what is left: the daily
    limit (cap and warm-up, per local calendar day) and, with ``interval``, this send run's fair
    share of it (see ``mailbox_remaining_today`` in ``sql/queries/emails.sql``).

    :param interval: the send runs' interval for pacing (``None``: no pacing).
    :returns: ``(rows, note)``; ``note`` says why nothing was claimed ("paused", "daily cap",
        "run share") .
    """
    with conn.transaction():
        locked = db.one(conn, "mailbox_lock", {"mailbox_id": mailbox_id})
        if locked is None:
            return [], "unknown mailbox"
        if locked["status"] != "active":
            return [], "mailbox paused"
        quota = db.one(conn, "mailbox_remaining_today", {"mailbox_id": mailbox_id, "now": now,
                                                         "interval": interval})
        remaining = quota["daily_limit"] - quota["used"]
        if remaining <= 0:
            return [], f"daily limit reached ({quota['used']}/{quota['daily_limit']})"
        if quota["run_left"] <= 0:
            return [], (f"run share used ({quota['slot_used']}/{quota['run_share']}; "
                        f"{quota['remaining']} left today over {quota['runs_left']} run(s))")
        rows = db.run(conn, "email_claim_batch", {
            "mailbox_id": mailbox_id, "limit": min(limit, quota["run_left"]), "now": now,
            "claim_token": uuid.uuid4(), "claimed_by": worker})
    return rows, ""


def _context(row: dict[str, Any], unsubscribe_url: str) -> dict[str, Any]:
    return {
        "lead": {k: row[k] for k in ("first_name", "last_name", "company", "title", "email")},
        "sender": {"name": row["mailbox_name"], "address": row["mailbox_address"]},
        "campaign": {"key": row["campaign_key"], "name": row["campaign_name"]},
        "step": row["step_position"],
        "unsubscribe_url": unsubscribe_url,
    }


def prepare(row: dict[str, Any], settings: Settings, now: dt.datetime) -> tuple[str, bytes]:
    """Render and build the message for a claimed row; return ``(message_id, wire bytes)``.

    :raises RenderError: the template failed for this lead.
    :raises MessageError: the message could not be built.
    """
    token = make_token(settings.unsubscribe_secret, row["id"])
    url = settings.unsubscribe_base + token
    domain = row["mailbox_address"].rpartition("@")[2]
    rendered = render(row["template"], row["subject"], _context(row, url))
    to_name = f"{row['first_name']} {row['last_name']}".strip()
    message_id = message_id_for(str(row["idempotency_key"]), row["mailbox_address"])
    msg = build_message(rendered, Envelope(
        from_address=row["mailbox_address"], from_name=row["mailbox_name"],
        to_address=row["email"], to_name=to_name, message_id=message_id, date=now,
        unsubscribe_url=url, unsubscribe_mailto=f"mailto:unsubscribe@{domain}?subject=unsubscribe%20{token}",
        feedback_id=feedback_id(row["campaign_key"], row["mailbox_id"], settings.feedback_sender_id),
        step_tag=f"{row['campaign_key']}/{row['step_position']}"))
    return message_id, to_wire(msg)


def _guarded(conn, name: str, params: dict[str, Any], summary: BatchSummary, what: str) -> bool:
    """Run one guarded transition; log it when it matched no row (our claim was taken away)."""
    if db.run(conn, name, params):
        return True
    summary.lost_claims += 1
    log.error("email %s: %s skipped: the row is no longer 'sending' under our claim token "
              "(the reaper or an operator took it over); nothing changed", params["email_id"], what)
    return False


def send_batch(url: str, mailbox_id: int, limit: int, connector: SmtpConnector,
               settings: Settings, *, worker: str | None = None, now: dt.datetime | None = None,
               ) -> BatchSummary:
    """Claim one batch of a mailbox and send it over one SMTP session.

    :param url: outreach database URL.
    :param mailbox_id: the mailbox whose due rows to claim.
    :param limit: at most this many rows (further limited by the mailbox's daily quota and, when
        ``settings.send_interval`` is set, by this send run's fair share of it).
    :param connector: opens the mailbox's SMTP connection by Airflow connection id.
    :param settings: see :class:`outreach.settings.Settings`.
    :param worker: recorded as ``claimed_by`` (default ``cli@host:pid``).
    :param now: a fixed clock (UTC) for claims and retries; default the database clock.
    :raises outreach.db.OutreachDBError: the database is unreachable; rows already claimed stay
        'sending' and go to the reaper (they are never silently resent).
    """
    worker = worker or worker_name()
    conn = db.connect(url, autocommit=True)
    try:
        rows, note = claim(conn, mailbox_id, limit, worker=worker, now=now,
                           interval=settings.send_interval)
        address = rows[0]["mailbox_address"] if rows else ""
        if not address:
            mb = conn.execute("SELECT address FROM outreach.mailboxes WHERE id = %s",
                              (mailbox_id,)).fetchone()
            address = mb["address"] if mb else ""
        summary = BatchSummary(mailbox_id=mailbox_id, mailbox=mask(address), claimed=len(rows),
                               note=note)
        if rows:
            session = SmtpSession(lambda: connector(rows[0]["smtp_conn_id"]))
            try:
                for row in rows:
                    _send_one(conn, session, row, settings, summary, now)
            finally:
                session.close()
        log.info(summary.line())
        return summary
    finally:
        conn.close()


def _send_one(conn, session: SmtpSession, row: dict[str, Any], settings: Settings,
              summary: BatchSummary, now: dt.datetime | None) -> None:
    guard = {"email_id": row["id"], "claim_token": row["claim_token"]}
    who = f"email {row['id']} ({mask(row['email'])}, step {row['step_position']})"
    # Pre-send check: the one suppression function, right before the handoff.
    if is_suppressed(conn, row["email"]):
        if _guarded(conn, "email_mark_suppressed", guard, summary, "mark suppressed"):
            summary.suppressed += 1
            log.info("%s: suppressed before the handoff; not sent", who)
        return
    clock = now or dt.datetime.now(dt.timezone.utc)
    try:
        message_id, payload = prepare(row, settings, clock)
    except (RenderError, MessageError) as exc:
        if _guarded(conn, "email_mark_failed",
                    {**guard, "failure_kind": "render", "error": f"RENDER {exc}"}, summary, "fail"):
            summary.failed += 1
            summary.failures.append(f"email {row['id']}: RENDER {exc}")
            log.error("%s failed at stage RENDER: %s", who, exc)
        return
    delivery = session.deliver(payload, row["mailbox_address"], row["email"])
    if delivery.outcome is Outcome.ACCEPTED:
        if _guarded(conn, "email_mark_sent", {**guard, "message_id": message_id,
                                              "smtp_reply": f"{delivery.code} {delivery.reply}",
                                              "now": now}, summary, "mark sent"):
            summary.sent += 1
        return
    reason = delivery.describe()
    summary.failures.append(f"email {row['id']}: {reason}")
    if delivery.outcome is Outcome.RETRY:
        res = db.run(conn, "email_mark_retry", {
            **guard, "now": now, "error": reason, "max_attempts": settings.max_attempts,
            "retry_after": settings.retry_after})
        if not res:
            summary.lost_claims += 1
            log.error("email %s: retry skipped: the row is no longer 'sending' under our claim "
                      "token; nothing changed", row["id"])
        elif res[0]["status"] == "failed":
            summary.failed += 1
            log.error("%s failed after %s attempts; last reply at stage %s", who,
                      res[0]["attempts"], reason)
        else:
            summary.retried += 1
            log.warning("%s not accepted (attempt %s) at stage %s; retry at %s UTC", who,
                        res[0]["attempts"], reason, res[0]["scheduled_for"])
    elif delivery.outcome is Outcome.PERMANENT:
        with conn.transaction():
            ok = _guarded(conn, "email_mark_failed",
                          {**guard, "failure_kind": "permanent", "error": reason}, summary, "fail")
            if ok and delivery.is_no_such_user:
                suppress(conn, row["email"], "bounced", f"smtp:{reason[:200]}")
        if ok:
            summary.failed += 1
            log.error("%s failed permanently at stage %s", who, reason)
    else:  # AMBIGUOUS
        if _guarded(conn, "email_mark_failed", {**guard, "failure_kind": "unconfirmed",
                    "error": f"{reason} - check Sent Items before doing anything"},
                    summary, "mark unconfirmed"):
            summary.unconfirmed += 1
            log.error("%s unconfirmed at stage %s: check Sent Items before doing anything; "
                      "never retried automatically", who, reason)


@dataclass
class PlannedSummary:
    """What one planned batch did across its mailboxes: one :class:`BatchSummary` per mailbox,
    and the totals (``claimed``, ``sent``, … as properties), for the task log and XCom."""

    label: str
    batches: list[BatchSummary] = field(default_factory=list)

    def _total(self, key: str) -> int:
        return sum(getattr(b, key) for b in self.batches)

    claimed = property(lambda self: self._total("claimed"))
    sent = property(lambda self: self._total("sent"))
    retried = property(lambda self: self._total("retried"))
    failed = property(lambda self: self._total("failed"))
    unconfirmed = property(lambda self: self._total("unconfirmed"))
    suppressed = property(lambda self: self._total("suppressed"))

    def line(self) -> str:
        """Return the analyst-facing summary line of the whole planned batch."""
        return (f"{self.label or 'batch'}: mailboxes={len(self.batches)} claimed={self.claimed} "
                f"sent={self.sent} retried={self.retried} failed={self.failed} "
                f"unconfirmed={self.unconfirmed} suppressed={self.suppressed}")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict: the totals, ``label`` and ``batches``."""
        keys = ("claimed", "sent", "retried", "failed", "unconfirmed", "suppressed")
        return {"label": self.label, **{k: getattr(self, k) for k in keys},
                "batches": [b.to_dict() for b in self.batches]}


def send_planned(url: str, quotas: Sequence[Sequence[int]], connector: SmtpConnector,
                 settings: Settings, *, label: str = "", worker: str | None = None,
                 now: dt.datetime | None = None) -> PlannedSummary:
    """Send one planned batch across mailboxes: for each ``(mailbox_id, n)`` of ``quotas``, claim
    and send up to ``n`` rows of that mailbox with :func:`send_batch`.

    Each mailbox is claimed on its own (its lock, its daily limit and run share, then the one
    claim statement), one after the other, so a planned batch never holds more than one
    mailbox's rows in 'sending' at a time and never exceeds any mailbox's quota, however many
    planned batches run at once (see :func:`outreach.queue.plan_batches`).

    :param quotas: ``[(mailbox_id, rows at most), …]`` in claim order (JSON lists are fine).
    :param label: the batch's name in logs (the plan's ``label``).
    :raises outreach.db.OutreachDBError: see :func:`send_batch`; mailboxes after the failing one
        are not claimed (their rows stay queued for the next run).
    """
    worker = worker or worker_name()
    summary = PlannedSummary(label=label)
    for mailbox_id, n in quotas:
        summary.batches.append(send_batch(url, int(mailbox_id), int(n), connector, settings,
                                          worker=worker, now=now))
    log.info(summary.line())
    return summary
