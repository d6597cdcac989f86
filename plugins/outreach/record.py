"""Recording a claimed row's outcome: the guarded transitions after a handoff (sent, retry,
failed, unconfirmed), the pre-send stops, the batch's summary, and the recovery after a lost
database connection (see :mod:`outreach.send`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from outreach import db
from outreach.bounces import apply_failure
from outreach.claim import describe, message_class
from outreach.logutil import log, mask_addresses
from outreach.reasons import owner_of, reason_of, status_in
from outreach.settings import Settings
from outreach.store import Conn, RowMissing, emails
from outreach.suppression import is_suppressed
from outreach.transport import Delivery, Outcome


@dataclass
class BatchSummary:
    """What one batch did, for the one summary line per batch and for XCom."""

    mailbox_id: int
    mailbox: str  # its label (outreach.logutil.mailbox_name), never the address
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    unconfirmed: int = 0
    suppressed: int = 0
    cancelled: int = 0
    lost_claims: int = 0
    released: int = 0
    held: int = 0  # queued rows this batch's claim held back for later (outreach.claim.ClaimNote)
    note: str = ""
    failures: list[str] = field(default_factory=list)
    message_class: str = "marketing"
    # Why the mailbox could not send at all this run (see outreach.send.MailboxUnreachable): conn_id, stage,
    # reply and the one line; None when it could.
    unreachable: dict[str, Any] | None = None

    def line(self) -> str:
        """Return the analyst-facing summary line."""
        kind = "batch" if self.message_class == "marketing" else f"{self.message_class} batch"
        text = (f"{kind} mailbox={self.mailbox_id} ({self.mailbox}) claimed={self.claimed} "
                f"sent={self.sent} retried={self.retried} failed={self.failed} "
                f"unconfirmed={self.unconfirmed} suppressed={self.suppressed}")
        if self.released:
            text += f" released={self.released}"
        if self.held:
            text += f" held={self.held}"
        if self.cancelled:  # the lead's enrolment stopped after the claim (migration 0012)
            text += f" cancelled={self.cancelled}"
        if self.lost_claims:
            text += f" lost_claims={self.lost_claims}"
        if self.unreachable:
            text += " FAILED"
        return text + (f" note={self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return asdict(self)


def _guarded(conn: Conn, transition: Callable[..., list[int]], params: dict[str, Any],
             summary: BatchSummary, what: str) -> bool:
    """Run one guarded transition (a store function of :mod:`outreach.store.emails` that returns
    the ids it changed); log it when it matched no row (our claim was taken away)."""
    if transition(conn, **params):
        return True
    _lost_claim(summary, params["email_id"], what)
    return False


def _lost_claim(summary: BatchSummary, email_id: int, what: str) -> None:
    summary.lost_claims += 1
    log.error("email %s: %s skipped: the row is no longer 'sending' under our claim token "
              "(the reaper or an operator took it over); nothing changed", email_id, what)


def _pre_send_stop(conn: Conn, row: dict[str, Any], guard: dict[str, Any], summary: BatchSummary,
                   who: str, address: str) -> bool:
    """The pre-send checks: end the row unsent when its recipient is suppressed or (campaign) its
    enrolment is no longer active; return whether it ended here. Asked only to say why a row is not
    handed off (its stamp did not match, or its message could not be built)."""
    if is_suppressed(conn, address, message_class(row)):
        if _guarded(conn, emails.email_mark_suppressed, guard, summary, "mark suppressed"):
            summary.suppressed += 1
            log.info("%s: suppressed before the handoff; not sent", who)
        return True
    if message_class(row) == "marketing":
        stopped = emails.email_cancel_stopped(conn, **guard)
        if stopped:
            summary.cancelled += 1
            log.info("%s: enrolment %s before the handoff; cancelled, not sent", who,
                     stopped.enrollment_status)
            return True
    return False


@dataclass
class _Progress:
    """Where a batch is: rows ``done`` (outcome recorded); ``delivery``, ``message_id`` and
    ``subject`` of the row ``row_id`` once its handoff reached the message body (only that row's,
    never another's)."""

    done: int = 0
    row_id: int | None = None
    delivery: Delivery | None = None
    message_id: str = ""
    subject: str | None = None

    def handed_off(self, row_id: int) -> Delivery | None:
        """Return the recorded delivery if it belongs to ``row_id``, else ``None``."""
        return self.delivery if self.row_id == row_id else None


@dataclass
class _Recovered:
    """What :func:`_recover` could do: the handed-off row's id and outcome (``recorded``: e.g.
    ``"email 3 recorded (sent)"``), ``released`` ids, ``stuck`` ids (left 'sending')."""

    recorded: str = ""
    released: list[int] = field(default_factory=list)
    stuck: list[int] = field(default_factory=list)

    def text(self) -> str:
        parts = [self.recorded] if self.recorded else []
        parts.append(f"released ids {self.released} back to the queue" if self.released
                     else "released nothing")
        if self.stuck:
            parts.append(f"ids {self.stuck} stay 'sending' for the reaper")
        return "; ".join(parts)


def _recover(url: str, remaining: list[dict[str, Any]], progress: _Progress, settings: Settings,
             summary: BatchSummary, now: dt.datetime | None, *, wait: bool = True) -> _Recovered:
    """After a lost connection: reconnect (for up to ``settings.db_recover_seconds``), record the
    outcome of the row that was handed off, and release the rows never handed off. Every write is
    the usual guarded UPDATE, so a write that did commit before the error changes nothing now."""
    out = _Recovered()
    deadline = time.monotonic() + (settings.db_recover_seconds if wait else 0)
    while True:
        try:
            conn = db.connect(url, autocommit=True)
            break
        except db.OutreachDBError as exc:
            if time.monotonic() >= deadline:
                out.stuck = [r["id"] for r in remaining]
                log.error("could not reconnect (%s): %s row(s) stay 'sending' for the reaper "
                          "(back to the queue unless their handoff was stamped): ids %s", exc,
                          len(remaining), out.stuck)
                return out
            time.sleep(0.5)
    try:
        untouched = remaining
        delivery = progress.handed_off(remaining[0]["id"]) if remaining else None
        if delivery is not None:
            current, untouched = remaining[0], remaining[1:]
            state = emails.email_claim_state(conn, email_id=current["id"])
            if state and state.status == "sending" and state.claim_token == current["claim_token"]:
                try:
                    _record(conn, current, delivery, progress.message_id, settings, summary, now,
                            progress.subject)
                    after = emails.email_claim_state(conn, email_id=current["id"])
                    if after is None:  # never: rows are not deleted
                        raise RowMissing("email_claim_state")
                    out.recorded = f"email {current['id']} recorded ({after.status})"
                except Exception as exc:  # noqa: BLE001 - still release the untouched rows below
                    out.stuck.append(current["id"])
                    log.error("email %s: could not record its outcome (%s) after %s: it stays "
                              "'sending' for the reaper", current["id"], delivery.describe(), exc)
            else:
                out.recorded = f"email {current['id']} was recorded before the loss"
        if untouched:
            released = emails.email_release_claimed(
                conn, ids=[r["id"] for r in untouched], claim_token=untouched[0]["claim_token"],
                error=None)
            out.released = sorted(released)
            summary.released += len(released)
            log.warning("released %s claimed row(s) that were never handed off back to the "
                        "queue: ids %s", len(released), out.released)
    finally:
        conn.close()
    return out


def _retry(conn: Conn, row: dict[str, Any], settings: Settings, summary: BatchSummary,
           now: dt.datetime | None, reason: str) -> None:
    """Not accepted, retryable: back to the queue after the row's retry delay (30 minutes for
    campaign mail, seconds for transactional mail: :meth:`Settings.retry_delay`), or failed
    after the last allowed attempt."""
    guard = {"email_id": row["id"], "claim_token": row["claim_token"]}
    who = describe(row)
    res = emails.email_mark_retry(
        conn, **guard, now=now, error=reason, max_attempts=settings.max_attempts,
        retry_after=settings.retry_delay(message_class(row), row["attempts"]))
    if not res:
        summary.lost_claims += 1
        log.error("email %s: retry skipped: the row is no longer 'sending' under our claim "
                  "token; nothing changed", guard["email_id"])
    elif res[0].status == "failed":
        summary.failed += 1
        log.error("%s failed after %s attempts; last reply at stage %s", who,
                  res[0].attempts, reason)
    else:
        summary.retried += 1
        log.warning("%s not accepted (attempt %s) at stage %s; retry at %s UTC", who,
                    res[0].attempts, reason, res[0].scheduled_for)


def _fail_render(conn: Conn, row: dict[str, Any], guard: dict[str, Any], summary: BatchSummary,
                 who: str, reason: str) -> None:
    """The message for this row cannot be built (stage RENDER): it fails, nothing handed over."""
    if _guarded(conn, emails.email_mark_failed,
                {**guard, "failure_kind": "render", "error": f"RENDER {reason}"}, summary, "fail"):
        summary.failed += 1
        summary.failures.append(f"email {row['id']}: RENDER {reason}")
        log.error("%s failed at stage RENDER: %s", who, reason)


def _record(conn: Conn, row: dict[str, Any], delivery: Delivery, message_id: str, settings: Settings,
            summary: BatchSummary, now: dt.datetime | None, subject: str | None = None) -> None:
    """Record one handoff's outcome with the guarded transition it calls for (``subject``: the
    Subject as sent, kept in the send log with the Message-ID)."""
    guard = {"email_id": row["id"], "claim_token": row["claim_token"]}
    who = describe(row)
    if delivery.outcome is Outcome.ACCEPTED:
        reply = f"{delivery.code} {delivery.reply}"
        if emails.email_mark_sent(conn, **guard, message_id=message_id, smtp_reply=reply,
                                  now=now, subject=subject,
                                  content_version=row.get("content_version")):
            summary.sent += 1
            # One line per email handed over: this one for the accepted, the lines below for
            # every other outcome (an analyst reads which emails went out, not only counts).
            log.info("%s: sent, %s, Message-ID <%s>", who, mask_addresses(reply), message_id)
        elif emails.email_record_late_accept(conn, **guard, message_id=message_id,
                                             smtp_reply=reply, now=now):
            # The reaper failed the row as unconfirmed while we waited for this reply: keep the
            # acceptance as evidence on it (never changing its status); a person decides.
            summary.lost_claims += 1
            summary.failures.append(f"email {row['id']}: accepted late: {reply}")
            log.error("%s: the server accepted it late (%s UTC, reply %s, Message-ID <%s>) after "
                      "the reaper had failed it as unconfirmed; recorded as evidence on the row: "
                      "resolve it with `outreach resolve --ids %s --decision was-sent`", who,
                      f"{now or dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S}", reply,
                      message_id, row["id"])
        else:
            summary.lost_claims += 1
            log.error("%s: the server accepted it (reply %s, Message-ID <%s>) but the row is no "
                      "longer 'sending' under our claim token, nor unconfirmed under it; nothing "
                      "changed", who, reply, message_id)
        return
    reason = delivery.describe()
    summary.failures.append(f"email {row['id']}: {reason}")
    if delivery.outcome is Outcome.RETRY:
        _retry(conn, row, settings, summary, now, reason)
    elif delivery.outcome is Outcome.PERMANENT:
        # The one rule for every failure (outreach.reasons, outreach.bounces): the reply's reason
        # and its owner decide the effect, as for a DSN about the same email.
        why = reason_of(status_in(delivery.reply), delivery.reply, delivery.code)
        kind = "sender_refused" if owner_of(why) == "sender" else "permanent"
        effect = ""
        with conn.transaction():
            ok = _guarded(conn, emails.email_mark_failed,
                          {**guard, "failure_kind": kind, "error": reason}, summary, "fail")
            if ok:
                effect = "; " + apply_failure(
                    conn, email_id=row["id"], mailbox_id=row["mailbox_id"], address=row["email"],
                    reason=why, status=status_in(delivery.reply), diagnostic=reason,
                    source=f"smtp:{row['id']}:{row['claim_token']}", actor="send",
                    now=now).text
        if ok:
            summary.failed += 1
            log.error("%s failed permanently at stage %s (%s)%s", who, reason, kind,
                      mask_addresses(effect))
    else:  # AMBIGUOUS
        if _guarded(conn, emails.email_mark_failed, {**guard, "failure_kind": "unconfirmed",
                    "error": f"{reason} - check Sent Items before doing anything"},
                    summary, "mark unconfirmed"):
            summary.unconfirmed += 1
            log.error("%s unconfirmed at stage %s: check Sent Items before doing anything; "
                      "never retried automatically", who, reason)
