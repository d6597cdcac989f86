"""Sending: claim a batch, re-check suppression and enrolment, render, hand off, record, row by row.

Each row's outcome is committed right after its own handoff, never at the end of the batch (an
acceptance without waiting for the WAL flush, which the next handoff stamp forces: see
``email_mark_sent``), and every change of a claimed row is one guarded UPDATE (status =
'sending' and our claim token).
What happens when this runs twice: a second sender's claim skips locked rows and can only claim
rows still 'queued'; a retried task claims fresh rows or none, and rows an earlier try left in
'sending' are left to the reaper.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import smtplib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outreach import db, failpoints
from outreach.addresses import EmailNotValidError, normalize_address
from outreach.bounces import apply_failure
from outreach.content import content_version
from outreach.feedback import feedback_id
from outreach.logutil import log, mailbox_name, mask, mask_addresses
from outreach.message import (
    Envelope,
    MessageError,
    ascii_domain,
    build_message,
    envelope_address,
    message_id_for,
    recipient_name,
    to_wire,
)
from outreach.queue import Reaped, plan_batches, reap
from outreach.reasons import owner_of, reason_of, status_in
from outreach.render import RenderError, render
from outreach.settings import Settings
from outreach.signing import DkimKey, SigningError, sign
from outreach.store import Conn, RowMissing, emails, mailboxes
from outreach.suppression import is_suppressed
from outreach.tokens import make_token
from outreach.transport import Delivery, Outcome, SmtpSession, Stage, session_refusal

SmtpConnector = Callable[[str], smtplib.SMTP]
"""Given a mailbox's Airflow SMTP connection id, return a connected ``smtplib.SMTP``."""

DkimKeyLoader = Callable[[str], bytes]
"""Given a mailbox's ``dkim_key_conn_id``, return its PEM private key (raise when it cannot)."""


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
    note: str = ""
    failures: list[str] = field(default_factory=list)
    message_class: str = "marketing"
    # Why the mailbox could not send at all this run (see MailboxUnreachable): conn_id, stage,
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


def worker_name(label: str = "cli") -> str:
    """Return ``label@host:pid``, recorded as ``claimed_by``."""
    import os

    return f"{label}@{socket.gethostname()}:{os.getpid()}"


MESSAGE_CLASSES = ("marketing", "transactional")


@dataclass
class Clock:
    """How a sender waits for a row's reserved handoff moment (the gap, see :func:`claim`):
    ``now()`` returns an aware datetime, ``sleep(seconds)`` waits. Injectable, so tests check the
    gap without sleeping; the default is the real clock."""

    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    sleep: Callable[[float], None] = time.sleep

    def wait_until(self, moment: dt.datetime | None, longest: dt.timedelta) -> float:
        """Sleep until ``moment`` (``None``: not at all), never longer than ``longest`` (a
        reservation further away than the claim horizon means the clocks disagree); return the
        seconds slept."""
        if moment is None:
            return 0.0
        seconds = min((moment - self.now()).total_seconds(), longest.total_seconds())
        if seconds <= 0:
            return 0.0
        self.sleep(seconds)
        return seconds


def claim(conn: Conn, mailbox_id: int, limit: int, *, worker: str, now: dt.datetime | None = None,
          interval: dt.timedelta | None = None, message_class: str = "marketing",
          gap_seconds: float = 0.0, gap_jitter: float = 0.0,
          gap_horizon: dt.timedelta = dt.timedelta(minutes=15),
          person_per_day: int | None = None, person_per_week: int | None = None,
          company_per_day: int | None = None, provider_hourly: dict[str, int] | None = None,
          ) -> tuple[list[dict[str, Any]], str]:
    """Claim up to ``limit`` due rows of one mailbox within its quota, in one transaction.

    Marketing: the mailbox row is locked first (``mailbox_lock``), so the counts that follow hold
    however many senders claim at once; then one claim statement takes at most what is left: the
    daily limit (cap and warm-up, per local calendar day) and, with ``interval``, this send run's
    share of it, the day spread evenly over the full send window (the rule:
    ``mailbox_remaining_today`` in ``sql/queries/mailboxes.sql``). With ``gap_seconds`` > 0 each
    claimed row gets ``row["not_before"]`` (aware datetime, UTC), the moment reserved for its
    handoff (``mailbox_reserve_handoffs``), and only rows reserved within ``gap_horizon`` are taken.
    ``person_per_day``/``person_per_week``/``company_per_day``: the contact policy across campaigns
    (``None``: that cap off; the rule: ``outreach.claim_emails_v4`` in ``sql/schema.sql``);
    ``provider_hourly``: at most that many rows of this mailbox an hour (rolling) to recipients
    of each mailbox provider (``{"microsoft": 20}``; the provider from cached MX records,
    :mod:`outreach.mxproviders`; ``None`` or empty: off); rows over a cap stay queued, moved
    later, with ``hold_reason``, and are not returned.
    Transactional: one claim statement (``email_claim_transactional``) with no window, cap,
    warm-up or gap; a paused mailbox claims nothing.

    :param interval: the send runs' interval for pacing (``None``: no pacing; marketing only).
    :param message_class: ``marketing`` or ``transactional``.
    :param gap_seconds: least seconds between two handoffs of the mailbox (0: none).
    :param gap_jitter: each gap is longer by up to this fraction of it, at random.
    :param gap_horizon: how far ahead handoffs may be reserved.
    :returns: ``(rows, note)``; ``note`` says why nothing was claimed ("paused", "daily cap",
        "run share", "gap") .
    :raises ValueError: an unknown message class.
    """
    if message_class == "transactional":
        rows = db.run(conn, "email_claim_transactional", {
            "mailbox_id": mailbox_id, "limit": limit, "now": now,
            "claim_token": uuid.uuid4(), "claimed_by": worker})
        if rows:
            failpoints.hit("after_claim")
        return rows, ""
    if message_class != "marketing":
        raise ValueError(f"message_class must be one of {MESSAGE_CLASSES}, got {message_class!r}")
    with conn.transaction():
        locked = mailboxes.mailbox_lock(conn, mailbox_id=mailbox_id)
        if locked is None:
            return [], "unknown mailbox"
        if locked.status != "active":
            return [], "mailbox paused"
        quota = mailboxes.mailbox_remaining_today(
            conn, mailbox_id=mailbox_id, now=now, interval=interval, gap_seconds=gap_seconds,
            gap_jitter=gap_jitter, horizon=gap_horizon)
        remaining = quota.daily_limit - quota.used
        if remaining <= 0:
            return [], f"daily limit reached ({quota.used}/{quota.daily_limit})"
        if quota.run_left <= 0:
            return [], (f"paced: {quota.slot_used}/{quota.run_share} this run, "
                        f"{quota.used}/{quota.due_by_now} of the day by this run")
        fit = quota.handoff_fit
        if fit is not None and fit <= 0:
            return [], "gap: the mailbox's next handoff is reserved beyond the claim horizon"
        rows = db.run(conn, "email_claim_batch", {
            "mailbox_id": mailbox_id, "limit": min(limit, quota.run_left, fit or limit),
            "now": now, "claim_token": uuid.uuid4(), "claimed_by": worker,
            "person_per_day": person_per_day, "person_per_week": person_per_week,
            "company_per_day": company_per_day,
            "provider_hourly": Jsonb(provider_hourly) if provider_hourly else None})
        if rows and fit is not None:
            moments = mailboxes.mailbox_reserve_handoffs(
                conn, mailbox_id=mailbox_id, rows=len(rows), now=now, gap_seconds=gap_seconds,
                gap_jitter=gap_jitter)
            for row, moment in zip(rows, moments, strict=True):
                row["not_before"] = moment.not_before
        if rows:
            failpoints.hit("claim_before_commit")
    if rows:
        failpoints.hit("after_claim")
    return rows, ""


def _context(row: dict[str, Any], unsubscribe_url: str) -> dict[str, Any]:
    return {
        "lead": {**{k: row[k] for k in ("first_name", "last_name", "company", "title", "email")},
                 "custom": row["custom"]},
        "sender": {"name": row["mailbox_name"], "address": row["mailbox_address"]},
        "campaign": {"key": row["campaign_key"], "name": row["campaign_name"]},
        "step": row["step_position"],
        "unsubscribe_url": unsubscribe_url,
    }


def transactional_context(context: dict[str, Any] | None, recipient: str, sender_name: str,
                          sender_address: str) -> dict[str, Any]:
    """Return the variables a transactional template is rendered with: what the application
    enqueued, plus ``recipient`` (``email``) and ``sender`` (``name``, ``address``)."""
    return {**(context or {}), "recipient": {"email": recipient},
            "sender": {"name": sender_name, "address": sender_address}}


def message_class(row: dict[str, Any]) -> str:
    """Return a claimed row's message class: ``marketing`` unless the row says otherwise (both
    claim queries return it; a row built by hand, as the benchmarks do, may leave it out)."""
    return str(row.get("message_class", "marketing"))


def describe(row: dict[str, Any]) -> str:
    """Return how logs name a claimed row: its id, the masked recipient, its step (marketing)
    or template (transactional) and its mailbox by name (:func:`outreach.logutil.mailbox_name`);
    never the full address."""
    what = (f"step {row['step_position']}" if message_class(row) == "marketing"
            else f"transactional {row['template']}")
    mailbox = mailbox_name(row.get("mailbox_label"), row.get("mailbox_name"),
                           row.get("mailbox_address"))
    return f"email {row['id']} ({mask(row['email'])}, {what}, mailbox {mailbox})"


@dataclass(frozen=True)
class Thread:
    """The thread a follow-up of a ``thread: true`` step replies in: ``message_ids`` of the
    lead's messages in it, oldest first, without angle brackets (step 1's, then each earlier
    threaded step's: the References; the last is the parent, In-Reply-To; RFC 5322 §3.6.4), and
    ``subject``, step 1's Subject as sent (``None`` when the send log does not have it: sent
    before migration 0012, or confirmed by an operator; it is then rendered again for this lead
    from step 1's ``template`` and ``subject_template``)."""

    message_ids: tuple[str, ...]
    subject: str | None
    template: str
    subject_template: str


_REPLY_PREFIX = re.compile(r"(?i)re:\s")


def reply_subject(subject: str) -> str:
    """Return the subject of a reply to ``subject``: ``"Re: "`` + it, unless it already starts
    with ``Re:`` (the prefix is not repeated)."""
    return subject if _REPLY_PREFIX.match(subject) else f"Re: {subject}"


def thread_of(conn: Conn, row: dict[str, Any]) -> Thread | None:
    """Return the thread a claimed row replies in, or ``None`` to send it as a new message.

    ``None`` when the row's step is not ``thread: true``, and when step 1 never went out to this
    lead (no send-log entry: it failed, was cancelled, or the row was made by hand): the step is
    then sent with its own subject, never a "Re:" to a message that does not exist (Gmail's
    sender guidelines: no "Re:" unless the message really is a reply). ``queue-due`` queues step
    n only after step n-1 was sent, so that case needs a row made outside it.
    """
    if not row.get("step_thread"):
        return None
    members = emails.email_thread(conn, email_id=row["id"])
    if not members or members[0].position != 1:
        log.warning("%s: thread: true, but step 1 was never sent to this lead; sent as a new "
                    "message with its own subject", describe(row))
        return None
    first = members[0]
    return Thread(tuple(m.message_id.strip().strip("<>") for m in members), first.subject,
                  first.template, first.subject_template)


def row_content_version(row: dict[str, Any]) -> str:
    """Return the content version (:func:`outreach.content.content_version`) of a claimed
    row's message: its step's (or its A/B variant's) template, subject, thread flag, campaign
    and variant name, or its transactional template."""
    if message_class(row) == "transactional":
        return content_version(row["template"], None)
    return content_version(row["template"], row["subject"], thread=bool(row.get("step_thread")),
                           campaign_key=row["campaign_key"], campaign_name=row["campaign_name"],
                           variant=row.get("variant"))


def prepare(row: dict[str, Any], settings: Settings, now: dt.datetime,
            dkim_private_key: bytes | None = None, *, thread: Thread | None = None,
            ) -> tuple[str, bytes]:
    """Render, build and (when the mailbox has a DKIM selector) sign the message for a claimed
    row; return ``(message_id, wire bytes)``.

    Marketing rows get the one-click unsubscribe headers and link (RFC 8058); transactional rows
    (``row["message_class"] == "transactional"``) are rendered from what the application
    enqueued, with the template's own subject and no List-Unsubscribe headers.

    Signing happens last, on the wire bytes, so ``h=`` covers exactly what goes out
    (see :mod:`outreach.signing`; RFC 8058 §4 wants List-Unsubscribe and List-Unsubscribe-Post
    covered).

    :param dkim_private_key: the PEM key of the mailbox's ``dkim_key_conn_id``; required when the
        row has a ``dkim_selector``.
    :param thread: the thread a ``thread: true`` step replies in (:func:`thread_of`): the message
        gets ``In-Reply-To`` (the thread's latest message) and ``References`` (all of them, RFC
        5322 §3.6.4) through the header builder, and the subject ``Re: `` + step 1's subject.
    :raises RenderError: the template failed for this lead.
    :raises MessageError: the message could not be built.
    :raises SigningError: the mailbox has a DKIM selector but the key is missing or unusable.
    """
    message_id, wire, _ = _build(row, settings, now, dkim_private_key, thread)
    return message_id, wire


def _build(row: dict[str, Any], settings: Settings, now: dt.datetime,
           dkim_private_key: bytes | None, thread: Thread | None) -> tuple[str, bytes, str]:
    """:func:`prepare`, also returning the Subject as built (kept in the send log)."""
    domain = ascii_domain(row["mailbox_address"].rpartition("@")[2])
    message_id = message_id_for(str(row["idempotency_key"]), row["mailbox_address"])
    if message_class(row) == "transactional":
        rendered = render(row["template"], None,
                          transactional_context(row["context"], row["email"], row["mailbox_name"],
                                                row["mailbox_address"]),
                          require_unsubscribe=False)
        envelope = Envelope(
            from_address=row["mailbox_address"], from_name=row["mailbox_name"],
            to_address=row["email"], to_name="", message_id=message_id, date=now,
            unsubscribe_url=None, unsubscribe_mailto=None,
            feedback_id=feedback_id(row["template"], row["mailbox_id"], settings.feedback_sender_id,
                                    "transactional"),
            step_tag=f"transactional/{row['template']}")
    else:
        token = make_token(settings.unsubscribe_secret, row["id"], now)  # stamped with the Date
        url = settings.unsubscribe_base + token
        context = _context(row, url)
        rendered = render(row["template"], row["subject"], context)
        if thread is not None:
            first = thread.subject or render(thread.template, thread.subject_template,
                                             {**context, "step": 1}).subject
            rendered = dataclasses.replace(rendered, subject=reply_subject(first))
        envelope = Envelope(
            from_address=row["mailbox_address"], from_name=row["mailbox_name"],
            to_address=row["email"], to_name=recipient_name(row["first_name"], row["last_name"]),
            message_id=message_id, date=now, unsubscribe_url=url,
            unsubscribe_mailto=f"mailto:unsubscribe@{domain}?subject=unsubscribe%20{token}",
            feedback_id=feedback_id(row["campaign_key"], row["mailbox_id"], settings.feedback_sender_id),
            step_tag=f"{row['campaign_key']}/{row['step_position']}",
            in_reply_to=thread.message_ids[-1] if thread else None,
            references=thread.message_ids if thread else ())
    msg = build_message(rendered, envelope)
    wire = to_wire(msg)
    if row.get("dkim_selector"):
        if not dkim_private_key:
            raise SigningError(f"mailbox {row['mailbox_id']} has dkim_selector "
                               f"{row['dkim_selector']!r} but no DKIM key was loaded")
        wire = sign(wire, DkimKey(row["dkim_selector"], domain, dkim_private_key))
    return message_id, wire, rendered.subject


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
    """The pre-send checks: end the row without a handoff when its recipient is suppressed (the
    one suppression function) or, for a campaign step, its enrolment is no longer active (a stop
    or a reply after the claim: outreach.stop_enrollment cancels only rows still 'queued').
    Return whether the row ended here. Asked only to say why a row is not handed off: when its
    handoff stamp did not match (email_touch_claim decides both checks atomically with the stamp)
    or its message could not be built."""
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


class MailboxUnreachable(RuntimeError):
    """A mailbox could not send at all this run, before any of its claimed rows reached the SMTP
    server: the connection or login failed (refused, reset, TLS, 421 greeting, AUTH 535, a missing
    Airflow connection), the server refused MAIL FROM because the session is not logged in (stage
    ``MAIL``, a 530 5.7.0: :func:`outreach.transport.session_refusal`), or the mailbox's DKIM key
    could not be loaded (stage ``SIGN``: nothing is ever sent unsigned). Its rows went back to the
    queue without counting an attempt (``email_release_claimed``), so a dead relay no longer burns
    the queue's attempts; they are claimed again by the next run.

    Raised by :func:`send_planned` and :func:`outreach.transactional.send_due` *after* every
    other mailbox of the batch was processed, so one dead relay does not hold back the others.
    The CLI exits non-zero with it; in Airflow the ``send_batch`` (or transactional send) task
    fails, and clearing it is safe (it claims fresh rows or none).

    The message has one line per failed mailbox::

        mailbox 1 (a***@mail.example) unreachable: Airflow connection 'outreach_smtp_anna'
        failed at CONNECT: ConnectionRefusedError: [Errno 111] Connection refused; released 12
        claimed row(s), no attempt counted

    :ivar failures: one dict per failed mailbox: ``mailbox_id``, ``mailbox`` (masked),
        ``conn_id`` (the Airflow SMTP connection, or the DKIM key connection for ``SIGN``),
        ``stage`` (``CONNECT``, ``MAIL`` or ``SIGN``), ``reply`` (the SMTP reply or errno text),
        ``released`` (row count) and ``line``.
    :ivar summaries: the :class:`BatchSummary` of every mailbox processed (for logs and XCom).
    """

    def __init__(self, failures: list[dict[str, Any]], summaries: list[BatchSummary]) -> None:
        self.failures = failures
        self.summaries = summaries
        super().__init__("; ".join(f["line"] for f in failures))


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


def raise_if_unreachable(summaries: Sequence[BatchSummary]) -> None:
    """Raise :class:`MailboxUnreachable` when a mailbox of ``summaries`` could not send at all.

    :raises MailboxUnreachable: see there.
    """
    failures = [{"mailbox_id": b.mailbox_id, "mailbox": b.mailbox, "released": b.released,
                 **b.unreachable} for b in summaries if b.unreachable]
    if failures:
        raise MailboxUnreachable(failures, list(summaries))


class BatchAborted(RuntimeError):
    """The database connection was lost during a send (the claim, or in the middle of a batch).
    What could be recorded after reconnecting was recorded; rows not yet handed off were
    released; the task must fail.

    The message is one line naming the stage and the ids::

        database connection lost mid-batch at stage SEND (mailbox 1, after 2 of 10 row(s)):
        email 3 recorded (sent); released ids [4, 5, …] back to the queue; (server closed the
        connection unexpectedly)

    :ivar stage: ``CLAIM`` (the claim statement or its read-back) or ``SEND`` (during the rows).
    :ivar released: ids put back in the queue (never handed off, attempt not counted).
    :ivar stuck: ids left 'sending' (no reconnect): the reaper takes them back — never-stamped
        rows to the queue, the one stamped row as unconfirmed.
    """

    def __init__(self, message: str, *, stage: str = "SEND", released: Sequence[int] = (),
                 stuck: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.stage, self.released, self.stuck = stage, list(released), list(stuck)


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


class ClaimHeartbeat:
    """The live sender's heartbeat on one claim: a daemon thread with its own database
    connection that runs ``email_heartbeat_claim`` on the claim's rows every ``interval``
    seconds (``Settings.heartbeat_interval``) until :meth:`stop`, so the reaper's short release
    (``email_reap_stale``, ``Settings.release_threshold``) requeues the unstamped rows of a
    sender that died — a SIGKILLed worker, a lost machine: its thread died with it — within
    minutes, and never those of one that lives (waiting for a gap, a slow reply). A beat that
    fails (the database restarting) is logged and the next one tries again on a new connection;
    the rule's safety never depends on it: a row the reaper took back is refused at its stamp.

    :param url: the outreach database.
    :param rows: the claimed rows (``id`` and ``claim_token``; one claim, one token).
    :param interval: seconds between two beats.
    :param now: a fixed clock (UTC) for the beats; default the database clock.
    """

    def __init__(self, url: str, rows: Sequence[dict[str, Any]], interval: float,
                 now: dt.datetime | None = None) -> None:
        self._url, self._interval, self._now = url, interval, now
        self._ids = [int(r["id"]) for r in rows]
        self._token = rows[0]["claim_token"] if rows else None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outreach-claim-heartbeat",
                                        daemon=True)

    def start(self) -> ClaimHeartbeat:
        """Start beating (nothing when the claim is empty); return self."""
        if self._ids and self._token is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and wait for the thread (at most one beat's statement)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        conn: Conn | None = None
        token = self._token
        assert token is not None
        try:
            while not self._stopped.wait(self._interval):
                try:
                    conn = conn or db.connect(self._url, autocommit=True)
                    if not emails.email_heartbeat_claim(conn, now=self._now, ids=self._ids,
                                                        claim_token=token):
                        return  # every row stamped, finished or taken: nothing left to keep
                except (psycopg.Error, db.OutreachDBError) as exc:
                    log.warning("claim heartbeat of %s row(s) failed (next try in %s s): %s",
                                len(self._ids), self._interval, _first_line(exc))
                    if conn is not None:
                        conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()


def send_batch(url: str, mailbox_id: int, limit: int, connector: SmtpConnector,
               settings: Settings, *, worker: str | None = None, now: dt.datetime | None = None,
               dkim_keys: DkimKeyLoader | None = None,
               message_class: str = "marketing", clock: Clock | None = None) -> BatchSummary:
    """Claim one batch of a mailbox and send it over one SMTP session.

    Each row's outcome is committed right after its own handoff.

    :param url: outreach database URL.
    :param mailbox_id: the mailbox whose due rows to claim.
    :param limit: at most this many rows (further limited by the mailbox's daily quota and, when
        ``settings.send_interval`` is set, by this send run's share of it; see :func:`claim`).
    :param connector: opens the mailbox's SMTP connection by Airflow connection id.
    :param settings: see :class:`outreach.settings.Settings`.
    :param worker: recorded as ``claimed_by`` (default ``cli@host:pid``).
    :param now: a fixed clock (UTC) for claims and retries; default the database clock.
    :param dkim_keys: loads a mailbox's DKIM private key by connection id (once per batch); when
        it is missing or fails for a mailbox with a DKIM selector, its rows go back to the queue
        unsent, attempts not counted, and the summary says the mailbox is unreachable (stage
        SIGN), as when its SMTP server refuses the connection or the login.
    :param message_class: which rows to claim: ``marketing`` (campaign steps, within the
        mailbox's quota) or ``transactional`` (see :func:`claim`).
    :param clock: waits for each row's reserved handoff moment (``settings.send_gap_seconds``;
        default the real clock).
    :raises BatchAborted: the database went away mid-batch (after recording what it could once
        reconnected; rows it could not record stay 'sending' for the reaper, never resent).
    :raises outreach.db.OutreachDBError: the database is unreachable before the claim.
    :returns: the batch's summary; ``summary.unreachable`` is set (and the batch's rows were
        released) when the mailbox could not connect, log in or load its DKIM key before a
        handoff: the callers raise :class:`MailboxUnreachable` after their other mailboxes.
    """
    worker = worker or worker_name()
    conn = db.connect(url, autocommit=True)
    try:
        try:
            rows, note = claim(conn, mailbox_id, limit, worker=worker, now=now,
                               interval=settings.send_interval, message_class=message_class,
                               gap_seconds=settings.send_gap_seconds,
                               gap_jitter=settings.send_gap_jitter,
                               gap_horizon=settings.gap_horizon,
                               person_per_day=settings.contact_per_day or None,
                               person_per_week=settings.contact_per_week or None,
                               company_per_day=settings.contact_company_per_day or None,
                               provider_hourly=settings.provider_hourly or None)
        except psycopg.OperationalError as exc:
            # The claim either committed or not; nothing was handed over either way, so rows it
            # may have claimed are put back in the queue by the reaper (never stamped).
            raise BatchAborted(
                f"database connection lost at stage CLAIM (mailbox {mailbox_id}): nothing was "
                f"handed over; rows the claim may have taken go back to the queue with the "
                f"reaper; ({_first_line(exc)})", stage="CLAIM") from exc
        clock = clock or Clock()
        longest_wait = settings.gap_horizon + dt.timedelta(
            seconds=settings.send_gap_seconds * (1 + settings.send_gap_jitter))
        summary = BatchSummary(mailbox_id=mailbox_id, mailbox="", claimed=len(rows), note=note,
                               message_class=message_class)
        progress = _Progress()
        heartbeat = ClaimHeartbeat(url, rows, settings.heartbeat_interval, now).start()
        # From here on, whatever stops the batch goes through _recover: nothing claimed is left
        # 'sending' for the reaper unless the database itself is gone.
        try:
            mailbox = mailboxes.mailbox_by_id(conn, mailbox_id=mailbox_id)
            summary.mailbox = (mailbox_name(mailbox.label, mailbox.display_name,
                                            mailbox.address) if mailbox else "")
            if rows:
                session = SmtpSession(lambda: connector(rows[0]["smtp_conn_id"]), settings.smtp_timeout)
                keys = _KeyCache(dkim_keys)
                try:
                    for row in rows:
                        # The gap: wait for this row's reserved moment, then the pre-send
                        # checks (suppression, our claim) run right before its handoff.
                        clock.wait_until(row.get("not_before"), longest_wait)
                        _send_one(conn, session, row, settings, summary, now, keys, progress)
                        progress.done += 1
                except _SessionFailed as exc:
                    _release_unreachable(conn, rows[progress.done:], exc, summary)
                finally:
                    session.close()
        except psycopg.OperationalError as exc:
            log.error("database connection lost during batch of mailbox %s after %s of %s "
                      "rows: %s", mailbox_id, progress.done, len(rows), exc)
            outcome = _recover(url, rows[progress.done:], progress, settings, summary, now)
            log.error(summary.line())
            raise BatchAborted(
                f"database connection lost mid-batch at stage SEND (mailbox {mailbox_id}, after "
                f"{progress.done} of {len(rows)} row(s)): {outcome.text()}; "
                f"({_first_line(exc)})", stage="SEND", released=outcome.released,
                stuck=outcome.stuck) from exc
        except BaseException:
            # A bug, or the task being terminated: record the handed-off row and release
            # the rest right away instead of leaving them all to the reaper.
            _recover(url, rows[progress.done:], progress, settings, summary, now, wait=False)
            log.error(summary.line())
            raise
        finally:
            heartbeat.stop()
        (log.error if summary.unreachable else log.info)(summary.line())
        return summary
    finally:
        conn.close()


def _release_unreachable(conn: Conn, rest: list[dict[str, Any]], exc: _SessionFailed,
                         summary: BatchSummary) -> None:
    """The mailbox cannot take any message (its session or its DKIM key failed before this row
    was handed over, or the server refused this row's MAIL FROM to an unauthenticated session):
    put this row and the rest back in the queue, attempts not counted, and note the failure for
    :class:`MailboxUnreachable`. A row already stamped (``handed_over_at``) is released by the
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


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


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


class _KeyCache:
    """Load each DKIM key once per batch; remember a failure as a :class:`SigningError`."""

    def __init__(self, loader: DkimKeyLoader | None) -> None:
        self._loader = loader
        self._keys: dict[str, bytes | SigningError] = {}

    def for_row(self, row: dict[str, Any]) -> bytes | None:
        conn_id = row.get("dkim_key_conn_id")
        if not row.get("dkim_selector") or not conn_id:
            return None
        if conn_id not in self._keys:
            if self._loader is None:
                self._keys[conn_id] = SigningError(f"no DKIM key loader for {conn_id!r}")
            else:
                try:
                    self._keys[conn_id] = self._loader(conn_id)
                except Exception as exc:  # noqa: BLE001 - a missing connection, a bad secret
                    # The message names the connection and the error type, never the key.
                    self._keys[conn_id] = SigningError(
                        f"cannot load the DKIM key from connection {conn_id!r}: "
                        f"{type(exc).__name__}")
        key = self._keys[conn_id]
        if isinstance(key, SigningError):
            raise key
        return key


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
                 now: dt.datetime | None = None, dkim_keys: DkimKeyLoader | None = None,
                 clock: Clock | None = None, limit: int | None = None) -> PlannedSummary:
    """Send one planned batch across mailboxes: for each ``(mailbox_id, n)`` of ``quotas``, claim
    and send up to ``n`` rows of that mailbox with :func:`send_batch`.

    Each mailbox is claimed on its own (its lock, its daily limit and run share, then the one
    claim statement), one after the other, so a planned batch never holds more than one
    mailbox's rows in 'sending' at a time and never exceeds any mailbox's quota, however many
    planned batches run at once (see :func:`outreach.queue.plan_batches`).

    :param quotas: ``[(mailbox_id, rows at most), …]`` in claim order (JSON lists are fine).
    :param label: the batch's name in logs (the plan's ``label``).
    :param limit: rows this planned batch claims at most, all its mailboxes together (``None``:
        only the quotas); each mailbox's claim is cut to what is left of it.
    :raises outreach.db.OutreachDBError: see :func:`send_batch`; mailboxes after the failing one
        are not claimed (their rows stay queued for the next run).
    :raises MailboxUnreachable: after every mailbox was processed, when one or more of them could
        not connect, log in or load its DKIM key (their rows were released).
    """
    worker = worker or worker_name()
    summary = PlannedSummary(label=label)
    for mailbox_id, n in quotas:
        left = None if limit is None else limit - summary.claimed
        if left is not None and left <= 0:
            break
        summary.batches.append(send_batch(url, int(mailbox_id),
                                          int(n) if left is None else min(int(n), left),
                                          connector, settings, worker=worker, now=now,
                                          dkim_keys=dkim_keys, clock=clock))
    log.info(summary.line())
    raise_if_unreachable(summary.batches)
    return summary


@dataclass
class SendRun:
    """What one send run (:func:`send_run`) did: the rows it reaped, the plan, and one
    :class:`PlannedSummary` per planned batch (in plan order)."""

    reaped: Reaped
    plan: list[dict[str, Any]]
    batches: list[PlannedSummary] = field(default_factory=list)

    @property
    def claimed(self) -> int:
        """Rows claimed by the whole run (0: nothing was due or allowed)."""
        return sum(b.claimed for b in self.batches)


def send_run(url: str, connector: SmtpConnector, settings: Settings, *,
             mailbox_id: int | None = None, worker: str | None = None,
             now: dt.datetime | None = None, dkim_keys: DkimKeyLoader | None = None,
             clock: Clock | None = None, limit: int | None = None) -> SendRun:
    """One send run, in the send DAG's order: reap stale 'sending' rows
    (:func:`outreach.queue.reap`, ``settings.reaper_threshold``), plan the run's batches
    (:func:`outreach.queue.plan_batches`: cap, warm-up, pacing, paused mailboxes), then send every
    planned batch (:func:`send_planned`) one after the other.

    The send DAG runs the same pieces as tasks (``plan`` reaps and plans, one mapped ``send_batch``
    per planned batch, see :mod:`outreach.airflow.tasks`); the ``outreach send`` command and the
    tests run them here, in one process.

    :param mailbox_id: plan for this mailbox only.
    :param worker: the ``claimed_by`` of every claim (default :func:`worker_name`).
    :param now: a fixed clock (UTC) for reap, plan and send; default the database clock.
    :param limit: rows the whole run claims at most, every planned batch and mailbox together
        (``outreach send --limit``; ``None``: as many as the plan allows). A claimed row is
        handed over at most once, so this bounds the messages the run sends.
    :raises BatchAborted: the database connection was lost while planning (nothing was claimed).
    :raises outreach.db.OutreachDBError: see :func:`send_batch`.
    :raises MailboxUnreachable: after every planned batch was sent, when a mailbox could not
        connect, log in or load its DKIM key (its rows were released; ``summaries`` holds every
        mailbox processed in the run).
    """
    reaped = reap(url, settings.reaper_threshold, release=settings.release_threshold, now=now)
    try:
        plan = plan_batches(url, settings.batch_size, parallelism=settings.send_parallelism,
                            interval=settings.send_interval, now=now, mailbox_id=mailbox_id)
    except psycopg.OperationalError as exc:  # nothing claimed yet
        raise BatchAborted(f"database connection lost at stage PLAN: nothing was claimed "
                           f"or released; ({str(exc).strip().splitlines()[0]})",
                           stage="PLAN") from exc
    run = SendRun(reaped, plan)
    failures: list[dict[str, Any]] = []
    for b in plan:
        left = None if limit is None else limit - run.claimed
        if left is not None and left <= 0:
            break
        try:
            run.batches.append(send_planned(url, b["quotas"], connector, settings, label=b["label"],
                                            worker=worker, now=now, dkim_keys=dkim_keys,
                                            clock=clock, limit=left))
        except MailboxUnreachable as exc:  # the other planned batches still go out
            run.batches.append(PlannedSummary(label=b["label"], batches=list(exc.summaries)))
            failures += exc.failures
    if failures:
        raise MailboxUnreachable(failures, [s for b in run.batches for s in b.batches])
    return run
