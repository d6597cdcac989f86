"""Typed calls of ``sql/queries/emails.sql``, one function per query, named like it.

Emails: one row per (lead, sequence step). Every state change after the claim is one guarded
UPDATE (status, and for claimed rows the claim token); what each guard is for: the query's
comment. ``now=None`` means the database clock."""

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
    """``email_queue_due``: queue the due step of every eligible lead, one row back per mailbox.

    ON CONFLICT (lead, step) inserts nothing twice. Only leads whose id is ``part`` modulo
    ``parts``; run it after :func:`email_planner_bulk_joins`."""
    return many(conn, "email_queue_due", {"now": now, "campaign_key": campaign_key,
                                          "part": part, "parts": parts}, QueuedCount)


def email_planner_bulk_joins(conn: Conn) -> None:
    """``email_planner_bulk_joins``: plan joins as hash or merge joins for the rest of the transaction."""
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


def email_claim_held(conn: Conn) -> str:
    """``email_claim_held``: what the claim just made in this transaction held back and skipped,
    the JSON text ``{"held": {reason: rows}, "busy": rows}`` (``""``: nothing to say)."""
    return cast("str", one_value(conn, "email_claim_held", {}, "held") or "")


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
    """``email_mark_sent``: after a 2xx to the end of DATA, mark the row sent and write its send log."""
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
    """``email_mark_failed``: final failure of a claimed row: 'permanent', 'render' or 'unconfirmed'."""
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
    """``email_reap_stale``: take back rows whose sender stopped (see the query for the two rules)."""
    return many(conn, "email_reap_stale", {"now": now, "threshold": threshold,
                                           "release": release}, ReapedEmail)


def email_heartbeat_claim(
    conn: Conn, *, now: dt.datetime | None, ids: list[int], claim_token: UUID
) -> int:
    """``email_heartbeat_claim``: refresh the claim's unstamped rows ``ids``; returns how many."""
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
    """``email_claim_state``: a claimed row's state, to recover after a lost connection (``None``: no row)."""
    return maybe_one(conn, "email_claim_state", {"email_id": email_id}, ClaimState)


def email_release_claimed(
    conn: Conn, *, error: str | None, ids: list[int], claim_token: UUID
) -> list[int]:
    """``email_release_claimed``: rows claimed but never handed off back to the queue, attempt uncounted."""
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
    """``email_touch_claim``: the handoff stamp, committed right before the row's MAIL FROM.

    Matches only while the row is ours, the recipient not suppressed and (marketing) the enrolment
    active; no row back: do not send. %(address)s: the Python normal form."""
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
    """``email_record_late_accept``: a 2xx for a row the reaper failed meanwhile, kept as evidence."""
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
    """``email_cancel_stopped``: cancel a claimed row whose enrolment is no longer active (``None``: active)."""
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
    """``email_by_message_ids``: our sent emails by Message-ID (lower-case, without <>)."""
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
    """``email_latest_sent_to``: the latest email a mailbox (or any) sent to an address (``None``: none)."""
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
    """``email_resolve_was_sent``: operator-confirmed: record it in the send log and mark the row sent."""
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
    """``email_requeue_failed``: an operator puts 'retries_exhausted' failures back in the queue."""
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
    """``email_unconfirmed_details``: unconfirmed emails (all, or %(ids)s) with what a person decides on."""
    return many(conn, "email_unconfirmed_details", {"ids": ids}, UnconfirmedDetail)


def email_cancel_suppressed(conn: Conn) -> list[int]:
    """``email_cancel_suppressed``: cancel the queued emails of now-suppressed addresses."""
    return cast("list[int]", values(conn, "email_cancel_suppressed", {}, "id"))


@dataclass(frozen=True, slots=True)
class UnsubscribeTarget:
    """A row of ``email_unsubscribe_target`` (columns as the query names them)."""

    id: int
    status: str
    email: str
    message_class: str


def email_unsubscribe_target(conn: Conn, *, email_id: int) -> UnsubscribeTarget | None:
    """``email_unsubscribe_target``: the email row an unsubscribe token names (``None``: no row)."""
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
