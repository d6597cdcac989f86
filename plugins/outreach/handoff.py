"""Handing one claimed row to the mailbox's SMTP server: build it, stamp the handoff, deliver,
then record (:mod:`outreach.record`); a mailbox that cannot take any message releases the
batch (see :class:`outreach.send.MailboxUnreachable`).
"""

from __future__ import annotations

import datetime as dt
import smtplib
from collections.abc import Callable
from typing import Any

from outreach import failpoints
from outreach.addresses import EmailNotValidError, normalize_address
from outreach.claim import describe
from outreach.compose import _build, _KeyCache, row_content_version, thread_of
from outreach.logutil import log
from outreach.message import (
    MessageError,
    envelope_address,
)
from outreach.record import BatchSummary, _fail_render, _lost_claim, _pre_send_stop, _Progress, _record
from outreach.render import RenderError
from outreach.settings import Settings
from outreach.signing import SigningError
from outreach.store import Conn, emails
from outreach.transport import Delivery, Outcome, SmtpSession, Stage, session_refusal

SmtpConnector = Callable[[str], smtplib.SMTP]
"""Given a mailbox's Airflow SMTP connection id, return a connected ``smtplib.SMTP``."""


class _SessionFailed(Exception):
    """Inside a batch: the mailbox cannot take any message (stage, connection id, reply, and
    what a person should change, when known)."""

    def __init__(self, stage: str, conn_id: str, reply: str, fix: str = "") -> None:
        self.stage, self.conn_id, self.reply, self.fix = stage, conn_id, reply, fix
        super().__init__(f"{stage} {reply}")


def _refusal_fix(refusal: str, conn_id: str) -> str:
    """The fix for a session refusal at MAIL (:func:`outreach.transport.session_refusal`)."""
    if "STARTTLS" in refusal:
        return (f"{refusal}: turn TLS on for connection {conn_id!r} (remove its extra "
                "disable_tls, or use implicit TLS)")
    return (f"{refusal}: give connection {conn_id!r} a login, or set its extra auth_type "
            "(README: OAuth 2.0)")


def _release_unreachable(conn: Conn, rest: list[dict[str, Any]], exc: _SessionFailed,
                         summary: BatchSummary) -> None:
    """The mailbox cannot take any message (its session or its DKIM key failed before this row
    was handed over, or the server refused this row's MAIL FROM to an unauthenticated session):
    put this row and the rest back in the queue, attempts not counted, and note the failure for
    :class:`outreach.send.MailboxUnreachable`. A row already stamped (``handed_over_at``) is released by the
    same guarded UPDATE (status 'sending' and our claim token); the caller only gets here
    before its body went out."""
    what = ("DKIM key connection" if exc.stage == "SIGN" else "Airflow connection")
    reason = f"{exc.stage} {exc.reply}"
    released = emails.email_release_claimed(
        conn, ids=[r["id"] for r in rest], claim_token=rest[0]["claim_token"],
        error=f"{reason} (released, attempt not counted)") if rest else []
    summary.released += len(released)
    fix = f"; {exc.fix}" if exc.fix else ""
    line = (f"mailbox {summary.mailbox_id} ({summary.mailbox}) unreachable: {what} "
            f"{exc.conn_id!r} failed at {exc.stage}: {exc.reply}{fix}; released {len(released)} "
            f"claimed row(s), no attempt counted")
    summary.unreachable = {"conn_id": exc.conn_id, "stage": exc.stage, "reply": exc.reply,
                           "line": line}
    summary.failures.append(line)
    log.error("%s: email ids %s", line, released)


def _send_one(conn: Conn, session: SmtpSession, row: dict[str, Any], settings: Settings,
              summary: BatchSummary, now: dt.datetime | None, keys: _KeyCache,
              progress: _Progress) -> None:
    guard = {"email_id": row["id"], "claim_token": row["claim_token"]}
    who = describe(row)
    # The recipient in the form suppressions are stored in. A row enqueued through SQL holds only
    # the SQL normaliser's form, which cannot apply the IDNA mapping RCPT TO gets (ascii_domain):
    # "x@ｅxample.com" goes to x@example.com and is checked as that. An address the one
    # normaliser refuses (a soft hyphen the transport would drop) is not sent at all.
    try:
        address = normalize_address(row["email"])
    except EmailNotValidError as exc:
        _fail_render(conn, row, guard, summary, who, f"recipient address: {exc}")
        return
    # No separate pre-send query here: the handoff stamp below decides suppression and the
    # enrolment atomically with taking the row for the handoff, right before MAIL FROM, and only
    # when it does not match are the checks asked one by one (_pre_send_stop) to say why. A
    # suppressed row is still built first (CPU only, nothing leaves the process); asking twice
    # cost two round trips a message (bench: send path).
    clock = now or dt.datetime.now(dt.UTC)
    thread = thread_of(conn, row)  # outside the try: a database error is not this row's RENDER
    try:
        message_id, payload, subject = _build(row, settings, clock, keys.for_row(row), thread)
        row["content_version"] = row_content_version(row)  # kept in the send log (_record)
        mail_from, rcpt_to = envelope_address(row["mailbox_address"]), envelope_address(row["email"])
    except SigningError as exc:
        # Nothing was handed over: a configuration problem of the mailbox (every row of it needs
        # the same key), not a reason to send unsigned nor to burn the rows' attempts. Like an
        # unreachable relay: release the batch, fail the mailbox's run (MailboxUnreachable).
        raise _SessionFailed("SIGN", row.get("dkim_key_conn_id") or "", str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - RenderError, MessageError or a bug for this row only
        reason = str(exc) if isinstance(exc, (RenderError, MessageError)) else f"{type(exc).__name__}: {exc}"
        # A row that would not have gone out anyway (suppressed, enrolment stopped) ends as that,
        # not as a render failure.
        if not _pre_send_stop(conn, row, guard, summary, who, address):
            _fail_render(conn, row, guard, summary, who, reason)
        return
    # Connect (or keep the session) first: a refused connection or a failed login is the
    # mailbox's failure, before any handoff of this row; the batch is released (see
    # MailboxUnreachable) instead of burning one attempt of every row.
    failed = session.open()
    if failed is not None:
        raise _SessionFailed("CONNECT", row["smtp_conn_id"], failed.reply
                             if failed.code is None else f"{failed.code} {failed.reply}")
    # The handoff stamp, right before MAIL FROM: re-assert our claim and record in the database
    # that this row is being handed over (email_touch_claim). If the reaper (or an operator) took
    # the row meanwhile, it is not ours to send. From the stamp on, the reaper fails the row as
    # unconfirmed; without it, the reaper puts it back in the queue. The reaper measures the
    # claim's age from here, so only a handoff that itself outlasts the threshold can be reaped.
    # The stamp matches only while the address is not suppressed and the enrolment is active: an
    # opt-out or a stop committed since the claim (during the connect, the build) ends the row
    # here instead of after its handoff.
    if not emails.email_touch_claim(conn, **guard, now=now, address=address):
        if not _pre_send_stop(conn, row, guard, summary, who, address):
            _lost_claim(summary, row["id"], "hand off")
        return
    failpoints.hit("after_handoff_stamp")
    def body_going_out() -> None:
        # The server said 354: from now until the transport returns, an interrupted handoff is
        # ambiguous, so recovery fails the row as unconfirmed instead of releasing it. Before
        # this point nothing can have been accepted, and recovery puts the row back in the queue.
        progress.row_id, progress.message_id, progress.subject = row["id"], message_id, subject
        progress.delivery = Delivery(Outcome.AMBIGUOUS, Stage.BODY, None,
                                     "the sender was interrupted during the SMTP handoff")

    delivery = session.deliver(payload, mail_from, rcpt_to, on_body=body_going_out)
    refusal = session_refusal(delivery)  # the rule: outreach.transport.session_refusal
    if refusal is not None:
        # MAIL FROM refused because the session is not logged in (530 5.7.0, RFC 4954 §6): the
        # mailbox's failure, like a failed login, never this row's. Nothing was accepted at MAIL,
        # so this row (stamped, but its body never went out) and the rest of the batch go back
        # to the queue with no attempt counted (email_release_claimed: status and claim token).
        # Raised before `progress` names this row: a recovery must not record the reply on it.
        raise _SessionFailed("MAIL", row["smtp_conn_id"], f"{delivery.code} {delivery.reply}",
                             _refusal_fix(refusal, row["smtp_conn_id"]))
    progress.row_id, progress.delivery, progress.message_id = row["id"], delivery, message_id
    progress.subject = subject
    if delivery.outcome is Outcome.ACCEPTED:
        failpoints.hit("after_accept")
    _record(conn, row, delivery, message_id, settings, summary, now, subject)
