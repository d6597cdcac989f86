"""Typed calls of ``sql/queries/emails.sql``, one function per query, named like it.

Emails: one row per (lead, sequence step). Every state change after the claim is one guarded
UPDATE: it names the status it expects and, for claimed rows, the claim token. A statement that
matches no row changes nothing, and the caller logs it. "Now" can be passed in (%(now)s); NULL
means the database clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from psycopg.types.json import Jsonb

from outreach.store._run import Conn, execute, many, maybe_one, one_value, values


@dataclass(frozen=True, slots=True)
class QueuedCount:
    """A row of ``email_queue_due`` (columns as the query names them)."""

    mailbox_id: int
    queued: int


def email_queue_due(
    conn: Conn, *, now: dt.datetime | None, campaign_key: str | None, part: int = 0,
    parts: int = 1,
) -> list[QueuedCount]:
    """``email_queue_due``: One set-based statement queues the due step of every eligible lead:
    step 1 once the lead is enrolled (plus its delay), step n once step n-1 was sent delay_days
    ago. ON CONFLICT on (lead, step) makes a second run, or a concurrent one, insert nothing.
    Suppressed addresses are skipped by the one suppression function. scheduled_for is the next
    open slot of the campaign's send window in the lead's time zone (falling back to the
    campaign's). Returns one row per mailbox with how many were queued (never one row per
    email). Only leads whose id is ``part`` modulo ``parts`` (default: all). Run it after
    email_planner_bulk_joins (see there): planned with nested loops on a fresh database, the NOT
    EXISTS rescans outreach.emails once per candidate while the same statement fills it."""
    return many(conn, "email_queue_due", {"now": now, "campaign_key": campaign_key,
                                          "part": part, "parts": parts}, QueuedCount)


def email_planner_bulk_joins(conn: Conn) -> None:
    """``email_planner_bulk_joins``: For the rest of this transaction, plan joins as hash or merge
    joins. email_queue_due is one bulk INSERT … SELECT whose NOT EXISTS reads the table it
    inserts into: when the statistics say outreach.emails is empty (a fresh database, the first
    run after a big import), the planner picks a nested-loop anti join that scans
    outreach.emails once per candidate row, and that table grows as the statement inserts —
    quadratic (EXPLAIN ANALYZE, 20,000 leads: 2.8 s with it, 0.6 s without; 100,000 leads: 116
    s). A hash anti join reads outreach.emails once."""
    execute(conn, "email_planner_bulk_joins", {})


@dataclass(frozen=True, slots=True)
class ClaimedEmail:
    """A row of ``email_claim_batch`` (columns as the query names them)."""

    id: int
    claim_token: UUID | None
    attempts: int
    idempotency_key: UUID
    lead_id: int | None
    step_id: int | None
    message_class: str
    email: str
    first_name: str
    last_name: str
    company: str
    title: str
    custom: Any
    step_position: int
    template: str
    subject: str
    step_thread: bool
    variant: str | None
    campaign_key: str
    campaign_name: str
    mailbox_id: int
    mailbox_address: str
    mailbox_name: str
    mailbox_label: str | None
    smtp_conn_id: str
    dkim_selector: str | None
    dkim_key_conn_id: str | None


def email_claim_batch(
    conn: Conn,
    *,
    limit: int,
    now: dt.datetime | None,
    mailbox_id: int,
    claim_token: UUID,
    claimed_by: str,
    person_per_day: int | None = None,
    person_per_week: int | None = None,
    company_per_day: int | None = None,
    provider_hourly: dict[str, int] | None = None,
) -> list[ClaimedEmail]:
    """``email_claim_batch``: the claim of campaign rows (``outreach.claim_emails_v4``, with the
    contact policy's caps that are set; ``None``: that cap is off; ``provider_hourly``: emails
    an hour from this mailbox per recipient provider)."""
    return many(
        conn,
        "email_claim_batch",
        {
            "limit": limit,
            "now": now,
            "mailbox_id": mailbox_id,
            "claim_token": claim_token,
            "claimed_by": claimed_by,
            "person_per_day": person_per_day,
            "person_per_week": person_per_week,
            "company_per_day": company_per_day,
            "provider_hourly": Jsonb(provider_hourly) if provider_hourly else None,
        },
        ClaimedEmail,
    )


@dataclass(frozen=True, slots=True)
class ClaimedTransactional:
    """A row of ``email_claim_transactional`` (columns as the query names them)."""

    id: int
    claim_token: UUID | None
    attempts: int
    idempotency_key: UUID
    lead_id: int | None
    step_id: int | None
    message_class: str
    email: str | None
    template: str | None
    context: Any | None
    delivery_key: str | None
    mailbox_id: int
    mailbox_address: str
    mailbox_name: str
    mailbox_label: str | None
    smtp_conn_id: str
    dkim_selector: str | None
    dkim_key_conn_id: str | None


def email_claim_transactional(
    conn: Conn,
    *,
    now: dt.datetime | None,
    mailbox_id: int,
    limit: int,
    claim_token: UUID,
    claimed_by: str,
) -> list[ClaimedTransactional]:
    """``email_claim_transactional``: the claim of transactional rows (``outreach.claim_emails_v1``)."""
    return many(
        conn,
        "email_claim_transactional",
        {
            "now": now,
            "mailbox_id": mailbox_id,
            "limit": limit,
            "claim_token": claim_token,
            "claimed_by": claimed_by,
        },
        ClaimedTransactional,
    )


@dataclass(frozen=True, slots=True)
class MailboxPlan:
    """A row of ``email_plan_transactional`` (columns as the query names them)."""

    mailbox_id: int
    address: str
    status: str
    due: int


def email_plan_transactional(conn: Conn, *, now: dt.datetime | None) -> list[MailboxPlan]:
    """``email_plan_transactional``: Mailboxes with due transactional rows, and how many."""
    return many(conn, "email_plan_transactional", {"now": now}, MailboxPlan)


def email_mark_sent(
    conn: Conn,
    *,
    now: dt.datetime | None,
    email_id: int,
    claim_token: UUID,
    message_id: str,
    smtp_reply: str,
    subject: str | None,
    content_version: str | None = None,
) -> list[int]:
    """``email_mark_sent``: Only after the server accepted the message (2xx to the end of DATA):
    mark the row sent and write its one send-log entry in the same statement. The guard (sending
    + our claim token) means a row the reaper or an operator took over is never overwritten. The
    Subject as sent is kept (a threaded follow-up replies with "Re: " + it, see email_thread).
    Committed without waiting for the WAL flush (synchronous_commit off for this statement's
    transaction only): the next synchronous commit on the server flushes the WAL up to and past
    it (the next row's handoff stamp, email_touch_claim, is one), else the WAL writer does within
    three times wal_writer_delay (PostgreSQL docs, 30.4 Asynchronous Commit). Only a crash of the
    database server in between can lose it, and then the row is what it was before: 'sending'
    with its handoff stamp, which the reaper fails as unconfirmed, never resends."""
    return cast(
        "list[int]",
        values(
            conn,
            "email_mark_sent",
            {
                "now": now,
                "email_id": email_id,
                "claim_token": claim_token,
                "message_id": message_id,
                "smtp_reply": smtp_reply,
                "subject": subject,
                "content_version": content_version,
            },
            "email_id",
        ),
    )


@dataclass(frozen=True, slots=True)
class RetryState:
    """A row of ``email_mark_retry`` (columns as the query names them)."""

    status: str
    attempts: int
    scheduled_for: dt.datetime


def email_mark_retry(
    conn: Conn,
    *,
    retry_after: dt.timedelta,
    now: dt.datetime | None,
    max_attempts: int,
    error: str,
    email_id: int,
    claim_token: UUID,
) -> list[RetryState]:
    """``email_mark_retry``: Not accepted, retryable: back to the queue %(retry_after)s later,
    unless this was the last allowed attempt, in which case the row fails with the last reply."""
    return many(
        conn,
        "email_mark_retry",
        {
            "retry_after": retry_after,
            "now": now,
            "max_attempts": max_attempts,
            "error": error,
            "email_id": email_id,
            "claim_token": claim_token,
        },
        RetryState,
    )


def email_mark_failed(
    conn: Conn, *, failure_kind: str, error: str, email_id: int, claim_token: UUID
) -> list[int]:
    """``email_mark_failed``: Final failure of a claimed row: 'permanent' (5xx), 'render' (the
    template failed) or 'unconfirmed' (the end of DATA was sent and no reply came: check Sent
    Items, never retried)."""
    return cast(
        "list[int]",
        values(
            conn,
            "email_mark_failed",
            {
                "failure_kind": failure_kind,
                "error": error,
                "email_id": email_id,
                "claim_token": claim_token,
            },
            "id",
        ),
    )


def email_mark_suppressed(conn: Conn, *, email_id: int, claim_token: UUID) -> list[int]:
    """``email_mark_suppressed``: The pre-send check found the address suppressed: the row ends
    without a handoff."""
    return cast(
        "list[int]",
        values(
            conn, "email_mark_suppressed", {"email_id": email_id, "claim_token": claim_token}, "id"
        ),
    )


@dataclass(frozen=True, slots=True)
class ReapedEmail:
    """A row of ``email_reap_stale`` (columns as the query names them)."""

    id: int
    mailbox_id: int
    claimed_by: str | None
    claimed_at: dt.datetime | None
    handed_over_at: dt.datetime | None
    unconfirmed: bool


def email_reap_stale(
    conn: Conn, *, now: dt.datetime | None, threshold: dt.timedelta, release: dt.timedelta
) -> list[ReapedEmail]:
    """``email_reap_stale``: Rows whose sender stopped (a killed worker, a lost connection). The
    handoff stamp (handed_over_at, committed right before MAIL FROM, see email_touch_claim) says
    what they may be and how soon that is known: * never handed over: back to the queue, the
    attempt not counted, as soon as neither the claim nor the live sender's heartbeat
    (claim_heartbeat_at, email_heartbeat_claim) is younger than ``release`` (the short release
    threshold), or once the claim is older than ``threshold`` whatever the heartbeat says. *
    handed over: failed as unconfirmed, for a person, once the stamp is older than
    ``threshold`` (the 30-minute rule, never the short one). One statement, guarded by status
    and the claim and heartbeat ages; under READ COMMITTED a row a sender changed concurrently is
    judged on its newest version, and a sender whose row was taken finds out at its stamp."""
    return many(conn, "email_reap_stale", {"now": now, "threshold": threshold,
                                           "release": release}, ReapedEmail)


def email_heartbeat_claim(
    conn: Conn, *, now: dt.datetime | None, ids: list[int], claim_token: UUID
) -> int:
    """``email_heartbeat_claim``: The live sender's heartbeat on its claim: the claim's rows
    ``ids`` not yet handed over get ``claim_heartbeat_at = now``, so the reaper's short release
    leaves them alone. Guarded by status and claim token (a row the reaper took stays taken);
    stamped rows are not touched. Returns how many rows it refreshed."""
    return cast("int", one_value(conn, "email_heartbeat_claim",
                                 {"now": now, "ids": ids, "claim_token": claim_token}, "refreshed"))


@dataclass(frozen=True, slots=True)
class MailboxDue:
    """A row of ``email_plan_mailboxes`` (columns as the query names them)."""

    mailbox_id: int
    address: str
    status: str
    due: int
    frozen: bool


def email_plan_mailboxes(
    conn: Conn, *, now: dt.datetime | None, mailbox_id: int | None
) -> list[MailboxDue]:
    """``email_plan_mailboxes``: Mailboxes with due rows, for the send plan: how many are due now
    (all mailboxes, or one); ``frozen``: in its freeze today (its local date; the claim takes
    nothing)."""
    return many(conn, "email_plan_mailboxes", {"now": now, "mailbox_id": mailbox_id}, MailboxDue)


@dataclass(frozen=True, slots=True)
class ClaimState:
    """A row of ``email_claim_state`` (columns as the query names them)."""

    status: str
    claim_token: UUID | None


def email_claim_state(conn: Conn, *, email_id: int) -> ClaimState | None:
    """``email_claim_state``: Read back a claimed row's state (used only to recover after a lost
    connection).

    ``None`` when no row matched."""
    return maybe_one(conn, "email_claim_state", {"email_id": email_id}, ClaimState)


def email_release_claimed(
    conn: Conn, *, error: str | None, ids: list[int], claim_token: UUID
) -> list[int]:
    """``email_release_claimed``: Rows claimed but never handed off (the batch stopped early, the
    SMTP server could not be reached or logged into, the DKIM key could not be loaded) go back
    to the queue; the attempt did not happen, so it is not counted. Guarded by our claim token
    like every transition. The sender alone knows how far a stamped row got (the stamp comes
    before MAIL FROM, the body only after the 354 go-ahead): it releases a stamped row only when
    its body never went out. %(error)s (optional) says why, for last_error."""
    return cast(
        "list[int]",
        values(
            conn,
            "email_release_claimed",
            {"error": error, "ids": ids, "claim_token": claim_token},
            "id",
        ),
    )


def email_touch_claim(
    conn: Conn, *, address: str, now: dt.datetime | None, email_id: int, claim_token: UUID
) -> list[int]:
    """``email_touch_claim``: The handoff stamp and heartbeat, committed right before MAIL FROM of
    the row (the SMTP session is already connected): proves the row is still ours (status and
    claim token), records that it is being handed over (handed_over_at: from now on the reaper
    treats it as possibly sent), and restarts the reaper's clock, so the reaper threshold only
    has to outlast one handoff (see outreach.settings). The stamp is also where the pre-send
    checks are decided: it matches only while the recipient is not suppressed and (marketing)
    the enrolment is still active, so an opt-out or a stop that commits after the sender's first
    look (while the SMTP session was being opened, the message built) is still seen; one that
    commits after the stamp meets a handoff already under way. %(address)s: the recipient in the
    Python normal form (outreach.addresses.normalize_address; the SQL normaliser cannot map IDNA
    spellings). No row back: an opt-out, a stop, or someone took the row; the sender looks
    which, and does not send."""
    return cast(
        "list[int]",
        values(
            conn,
            "email_touch_claim",
            {"address": address, "now": now, "email_id": email_id, "claim_token": claim_token},
            "id",
        ),
    )


def email_record_late_accept(
    conn: Conn,
    *,
    now: dt.datetime | None,
    smtp_reply: str,
    message_id: str,
    email_id: int,
    claim_token: UUID,
) -> list[int]:
    """``email_record_late_accept``: The server accepted (2xx to the end of DATA) a row that is no
    longer ours to mark sent: the reaper failed it as unconfirmed while we waited for the reply.
    Add the acceptance as evidence (when, the reply, the Message-ID) to that unconfirmed row of
    the same claim token, never changing its status (the unconfirmed guard trigger would refuse
    that anyway): a person decides, and `outreach unconfirmed` shows it. The first evidence is
    kept."""
    return cast(
        "list[int]",
        values(
            conn,
            "email_record_late_accept",
            {
                "now": now,
                "smtp_reply": smtp_reply,
                "message_id": message_id,
                "email_id": email_id,
                "claim_token": claim_token,
            },
            "id",
        ),
    )


@dataclass(frozen=True, slots=True)
class EmailCancelStoppedRow:
    """A row of ``email_cancel_stopped`` (columns as the query names them)."""

    id: int
    enrollment_status: str


def email_cancel_stopped(
    conn: Conn, *, email_id: int, claim_token: UUID
) -> EmailCancelStoppedRow | None:
    """``email_cancel_stopped``: The pre-send check's second half (next to the suppression check):
    a claimed row whose enrolment is no longer active ends 'cancelled' without a handoff.
    Guarded by our claim token like every transition of a claimed row; no row back: the
    enrolment is active (or the claim was taken, which the heartbeat right before the handoff
    finds). Transactional rows have no enrolment.

    ``None`` when no row matched."""
    return maybe_one(
        conn,
        "email_cancel_stopped",
        {"email_id": email_id, "claim_token": claim_token},
        EmailCancelStoppedRow,
    )


@dataclass(frozen=True, slots=True)
class SentEmail:
    """A row of ``email_by_message_ids`` (columns as the query names them)."""

    id: int
    lead_id: int | None
    campaign_id: int | None
    mailbox_id: int
    message_id: str
    message_class: str
    email: str


def email_by_message_ids(conn: Conn, *, ids: list[str]) -> list[SentEmail]:
    """``email_by_message_ids``: Our sent emails whose Message-ID (send_log, without <>) is one of
    %(ids)s (lower-cased by the caller: ours are lower-case), with what a reply or bounce needs
    to act on."""
    return many(conn, "email_by_message_ids", {"ids": ids}, SentEmail)


@dataclass(frozen=True, slots=True)
class LatestSent:
    """A row of ``email_latest_sent_to`` (columns as the query names them)."""

    id: int
    lead_id: int | None
    campaign_id: int | None
    mailbox_id: int
    message_class: str
    email: str


def email_latest_sent_to(conn: Conn, *, mailbox_id: int | None, address: str) -> LatestSent | None:
    """``email_latest_sent_to``: The latest email a mailbox (or any, %(mailbox_id)s NULL) sent to a
    lead's address: what a bounce or complaint without our Message-ID is about.

    ``None`` when no row matched."""
    return maybe_one(
        conn, "email_latest_sent_to", {"mailbox_id": mailbox_id, "address": address}, LatestSent
    )


@dataclass(frozen=True, slots=True)
class SentSample:
    """A row of ``email_sent_sample`` (columns as the query names them)."""

    id: int
    email: str
    message_id: str
    mailbox_address: str


def email_sent_sample(conn: Conn, *, n: int) -> list[SentSample]:
    """``email_sent_sample``: The first %(n)s campaign emails sent (the demo answers, bounces and
    unsubscribes these)."""
    return many(conn, "email_sent_sample", {"n": n}, SentSample)


@dataclass(frozen=True, slots=True)
class UnconfirmedEmail:
    """A row of ``email_list_unconfirmed`` (columns as the query names them)."""

    id: int
    idempotency_key: UUID
    last_error: str | None
    claimed_by: str | None
    claimed_at: dt.datetime | None
    attempts: int
    handed_over_at: dt.datetime | None
    late_accepted_at: dt.datetime | None
    late_accept_reply: str | None
    late_accept_message_id: str | None
    email: str
    mailbox_address: str
    mailbox_id: int
    imap_conn_id: str | None
    campaign_key: str | None
    message_class: str


def email_list_unconfirmed(
    conn: Conn, *, ids: list[int] | None, campaign_key: str | None, mailbox: str | None
) -> list[UnconfirmedEmail]:
    """``email_list_unconfirmed``: Unconfirmed emails, by ids or by campaign and/or mailbox (NULL:
    any)."""
    return many(
        conn,
        "email_list_unconfirmed",
        {"ids": ids, "campaign_key": campaign_key, "mailbox": mailbox},
        UnconfirmedEmail,
    )


def email_resolve_was_sent(conn: Conn, *, email_id: int, message_id: str, note: str) -> list[int]:
    """``email_resolve_was_sent``: A person saw it in Sent Items (or the server's late acceptance
    is evidence enough): record it in the send log as operator-confirmed and mark the row sent,
    in one statement. The send log's acceptance time is the server's late acceptance when there
    was one, else the claim time."""
    return cast(
        "list[int]",
        values(
            conn,
            "email_resolve_was_sent",
            {"email_id": email_id, "message_id": message_id, "note": note},
            "email_id",
        ),
    )


def email_resolve_not_sent(conn: Conn, *, note: str, email_id: int) -> list[int]:
    """``email_resolve_not_sent``: A person checked: it did not go out. Back to the queue with the
    same idempotency key, so the next attempt carries the same Message-ID."""
    return cast(
        "list[int]",
        values(conn, "email_resolve_not_sent", {"note": note, "email_id": email_id}, "id"),
    )


@dataclass(frozen=True, slots=True)
class RequeuedEmail:
    """A row of ``email_requeue_failed`` (columns as the query names them)."""

    email_id: int
    attempts: int
    last_error: str | None


def email_requeue_failed(
    conn: Conn,
    *,
    ids: list[int] | None,
    campaign_key: str | None,
    mailbox: str | None,
    failure_kind: str,
    requeued_by: str,
    reason: str,
) -> list[RequeuedEmail]:
    """``email_requeue_failed``: An operator puts not-accepted failures back in the queue (outreach
    requeue / the outreach_requeue DAG), after fixing what made every attempt fail (a relay down
    for an hour, a full mailbox since emptied). Only failure_kind 'retries_exhausted': nothing
    of those was ever accepted, so another attempt cannot send twice. Never 'unconfirmed' (may
    have gone out: its own resolution) nor 'permanent'/'render' (they would fail the same way).
    Guarded by status and failure kind in one statement, so requeuing twice changes nothing; the
    row gets its full attempts again (same idempotency key, so the same Message-ID), and the
    requeue is recorded with who, why and the failure it came from. %(ids)s, %(campaign_key)s,
    %(mailbox)s: NULL = any."""
    return many(
        conn,
        "email_requeue_failed",
        {
            "ids": ids,
            "campaign_key": campaign_key,
            "mailbox": mailbox,
            "failure_kind": failure_kind,
            "requeued_by": requeued_by,
            "reason": reason,
        },
        RequeuedEmail,
    )


@dataclass(frozen=True, slots=True)
class FailureState:
    """A row of ``email_failure_state`` (columns as the query names them)."""

    id: int
    status: str
    failure_kind: str | None


def email_failure_state(conn: Conn, *, ids: list[int]) -> list[FailureState]:
    """``email_failure_state``: The status and failure kind of emails by id (to say why a requested
    id was not requeued)."""
    return many(conn, "email_failure_state", {"ids": ids}, FailureState)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A row of ``email_run_outcomes`` (columns as the query names them)."""

    mailbox_id: int
    label: str
    display_name: str
    address: str
    claimed: int
    sent: int
    unconfirmed: int
    failed: int | None
    requeued: int
    sending: int
    suppressed: int
    unconfirmed_ids: list[int] | None


def email_run_outcomes(conn: Conn, *, worker_prefix: str) -> list[RunOutcome]:
    """``email_run_outcomes``: Per mailbox, what the rows a run (or one task try: a full worker
    name) claimed are now; a run's rows are those whose claimed_by starts with '<dag id>/<run
    id>/'."""
    return many(conn, "email_run_outcomes", {"worker_prefix": worker_prefix}, RunOutcome)


@dataclass(frozen=True, slots=True)
class UnconfirmedDetail:
    """A row of ``email_unconfirmed_details`` (columns as the query names them)."""

    id: int
    idempotency_key: UUID
    message_class: str
    template: str | None
    last_error: str | None
    claimed_at: dt.datetime | None
    claimed_by: str | None
    handed_over_at: dt.datetime | None
    late_accepted_at: dt.datetime | None
    late_accept_reply: str | None
    late_accept_message_id: str | None
    email: str
    campaign_key: str | None
    step: int | None
    mailbox_id: int
    mailbox_address: str
    label: str
    display_name: str
    imap_conn_id: str | None


def email_unconfirmed_details(conn: Conn, *, ids: list[int] | None) -> list[UnconfirmedDetail]:
    """``email_unconfirmed_details``: Unconfirmed emails (all, or %(ids)s) with what a person needs
    to decide: campaign and step, mailbox name, claim and handoff, the last error, a late
    acceptance, the IMAP account whose Sent folder may hold it
    (outreach.resolve.unconfirmed_details)."""
    return many(conn, "email_unconfirmed_details", {"ids": ids}, UnconfirmedDetail)


def email_cancel_suppressed(conn: Conn) -> list[int]:
    """``email_cancel_suppressed``: Queued emails of addresses that are now suppressed (for their
    message class) are cancelled in the same transaction as the suppression. Rows already
    'sending' are left alone: the pre-send check stops them."""
    return cast("list[int]", values(conn, "email_cancel_suppressed", {}, "id"))


@dataclass(frozen=True, slots=True)
class UnsubscribeTarget:
    """A row of ``email_unsubscribe_target`` (columns as the query names them)."""

    id: int
    status: str
    email: str
    message_class: str


def email_unsubscribe_target(conn: Conn, *, email_id: int) -> UnsubscribeTarget | None:
    """``email_unsubscribe_target``: The email row an unsubscribe token names, with the address it
    went (or will go) to.

    ``None`` when no row matched."""
    return maybe_one(conn, "email_unsubscribe_target", {"email_id": email_id}, UnsubscribeTarget)


@dataclass(frozen=True, slots=True)
class ThreadMember:
    """A row of ``email_thread`` (columns as the query names them)."""

    position: int
    message_id: str
    subject: str | None
    template: str
    subject_template: str


def email_thread(conn: Conn, *, email_id: int) -> list[ThreadMember]:
    """``email_thread``: The thread a claimed email of a threaded step replies in: the lead's
    messages in the same campaign that went out for step 1 and every earlier threaded step,
    oldest first; no row for position 1 when step 1 was not sent to this lead."""
    return many(conn, "email_thread", {"email_id": email_id}, ThreadMember)


@dataclass(frozen=True, slots=True)
class Smtputf8Count:
    """A row of ``email_queued_needing_smtputf8`` (columns as the query names them)."""

    mailbox_id: int
    rows: int


def email_queued_needing_smtputf8(conn: Conn) -> list[Smtputf8Count]:
    """``email_queued_needing_smtputf8``: Queued rows per mailbox whose recipient's local part
    is not ASCII: only a relay that offers SMTPUTF8 can carry them (RFC 6531 §3.4; the rule:
    :func:`outreach.transport.relay_cannot_carry`)."""
    return many(conn, "email_queued_needing_smtputf8", {}, Smtputf8Count)
