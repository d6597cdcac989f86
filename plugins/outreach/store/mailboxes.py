"""Typed calls of ``sql/queries/mailboxes.sql``, one function per query, named like it.

Mailbox status (pause, resume, their history) and the figures the health rules look at; what
each guard is for: the query's comment."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from outreach.store._run import Conn, many, maybe_one, one, one_value, values


def mailbox_clear_transactional(conn: Conn, *, address: str) -> list[int]:
    """``mailbox_clear_transactional``: Before a mailbox takes the transactional mark, every other
    mailbox loses it."""
    return cast(
        "list[int]", values(conn, "mailbox_clear_transactional", {"address": address}, "id")
    )


def mailbox_upsert(
    conn: Conn,
    *,
    address: str,
    display_name: str,
    label: str,
    smtp_conn_id: str,
    timezone: str,
    daily_cap: int,
    warmup_start: dt.date | None,
    warmup_initial: int,
    warmup_days: int,
    warmup_increment: int,
    dkim_selector: str | None,
    dkim_key_conn_id: str | None,
    transactional: bool,
    imap_conn_id: str | None,
    unsubscribe_imap_conn_id: str | None,
    freeze_from: dt.date | None = None,
    freeze_to: dt.date | None = None,
    provider: str | None = None,
) -> int:
    """``mailbox_upsert``: create or update a mailbox from the file; its pause status is never touched."""
    return cast(
        "int",
        one_value(
            conn,
            "mailbox_upsert",
            {
                "address": address,
                "display_name": display_name,
                "label": label,
                "smtp_conn_id": smtp_conn_id,
                "timezone": timezone,
                "daily_cap": daily_cap,
                "warmup_start": warmup_start,
                "warmup_initial": warmup_initial,
                "warmup_days": warmup_days,
                "warmup_increment": warmup_increment,
                "dkim_selector": dkim_selector,
                "dkim_key_conn_id": dkim_key_conn_id,
                "transactional": transactional,
                "imap_conn_id": imap_conn_id,
                "unsubscribe_imap_conn_id": unsubscribe_imap_conn_id,
                "freeze_from": freeze_from,
                "freeze_to": freeze_to,
                "provider": provider,
            },
            "id",
        ),
    )


@dataclass(frozen=True, slots=True)
class PreflightTarget:
    """A row of ``mailbox_preflight_targets`` (columns as the query names them)."""

    id: int
    address: str
    domain: str
    dkim_selector: str | None
    dkim_key_conn_id: str | None
    smtp_conn_id: str


def mailbox_preflight_targets(conn: Conn) -> list[PreflightTarget]:
    """``mailbox_preflight_targets``: Active mailboxes with their DKIM settings: the preflight
    checks each sending domain once per selector. Paused mailboxes send nothing, so they are not
    checked."""
    return many(conn, "mailbox_preflight_targets", {}, PreflightTarget)


@dataclass(frozen=True, slots=True)
class LockedMailbox:
    """A row of ``mailbox_lock`` (columns as the query names them)."""

    id: int
    address: str
    status: str


def mailbox_lock(conn: Conn, *, mailbox_id: int) -> LockedMailbox | None:
    """``mailbox_lock``: serialise claims of one mailbox for the transaction (``None``: no row)."""
    return maybe_one(conn, "mailbox_lock", {"mailbox_id": mailbox_id}, LockedMailbox)


@dataclass(frozen=True, slots=True)
class MailboxQuota:
    """A mailbox's quota now (``mailbox_remaining_today``), in rows: today's (cap, warm-up) and this run's.

    ``run_left`` is what this run may claim; ``handoff_fit`` is ``None`` without a gap; the window and
    run figures are ``None`` without pacing or when nothing is queued for today."""

    id: int
    status: str
    daily_limit: int
    used: int
    remaining: int
    window_start: dt.datetime | None
    window_end: dt.datetime | None
    window_runs: int
    runs_left: int
    run_number: int | None
    run_share: int | None
    due_by_now: int | None
    slot_used: int
    run_left: int
    handoff_fit: int | None


def mailbox_remaining_today(
    conn: Conn,
    *,
    interval: dt.timedelta | None,
    gap_seconds: float | None,
    horizon: dt.timedelta | None,
    now: dt.datetime | None,
    mailbox_id: int,
    gap_jitter: float | None,
) -> MailboxQuota:
    """``mailbox_remaining_today``: the pacing rule, once (sql/queries/mailboxes.sql).

    :param interval: the send runs' interval (pacing), ``None`` = no pacing.
    :param gap_seconds: the least gap between two handoffs, ``None`` or 0 = no gap.
    :param horizon: how far ahead handoffs are counted (``handoff_fit``).
    :param gap_jitter: the gap's random share (0…1).
    :raises RowMissing: no mailbox has that id."""
    return one(
        conn,
        "mailbox_remaining_today",
        {
            "interval": interval,
            "gap_seconds": gap_seconds,
            "horizon": horizon,
            "now": now,
            "mailbox_id": mailbox_id,
            "gap_jitter": gap_jitter,
        },
        MailboxQuota,
    )


@dataclass(frozen=True, slots=True)
class Handoff:
    """A row of ``mailbox_reserve_handoffs`` (columns as the query names them)."""

    k: int
    not_before: dt.datetime | None


def mailbox_reserve_handoffs(
    conn: Conn,
    *,
    rows: int,
    gap_seconds: float,
    gap_jitter: float,
    now: dt.datetime | None,
    mailbox_id: int,
) -> list[Handoff]:
    """``mailbox_reserve_handoffs``: reserve the handoff moments of the %(rows)s rows a claim took."""
    return many(
        conn,
        "mailbox_reserve_handoffs",
        {
            "rows": rows,
            "gap_seconds": gap_seconds,
            "gap_jitter": gap_jitter,
            "now": now,
            "mailbox_id": mailbox_id,
        },
        Handoff,
    )


@dataclass(frozen=True, slots=True)
class MailboxName:
    """A row of ``mailbox_by_id`` (columns as the query names them)."""

    id: int
    address: str
    status: str
    label: str
    display_name: str


def mailbox_by_id(conn: Conn, *, mailbox_id: int) -> MailboxName | None:
    """``mailbox_by_id``: runs mailbox_by_id.

    ``None`` when no row matched."""
    return maybe_one(conn, "mailbox_by_id", {"mailbox_id": mailbox_id}, MailboxName)


@dataclass(frozen=True, slots=True)
class Mailbox:
    """A row of ``mailbox_find`` (columns as the query names them)."""

    id: int
    address: str
    status: str
    paused_reason: str | None
    paused_at: dt.datetime | None
    paused_by: str | None
    timezone: str
    daily_cap: int


def mailbox_find(conn: Conn, *, mailbox_id: int | None, address: str | None) -> Mailbox | None:
    """``mailbox_find``: a mailbox by id or by address (case-insensitive) (``None``: no row)."""
    return maybe_one(conn, "mailbox_find", {"mailbox_id": mailbox_id, "address": address}, Mailbox)


@dataclass(frozen=True, slots=True)
class MailboxConnections:
    """A row of ``mailbox_connections`` (columns as the query names them)."""

    id: int
    address: str
    smtp_conn_id: str
    imap_conn_id: str | None


def mailbox_connections(
    conn: Conn, *, mailbox_id: int | None, address: str | None
) -> MailboxConnections | None:
    """``mailbox_connections``: A mailbox's Airflow connections, by id or address
    (case-insensitive).

    ``None`` when no row matched."""
    return maybe_one(
        conn,
        "mailbox_connections",
        {"mailbox_id": mailbox_id, "address": address},
        MailboxConnections,
    )


@dataclass(frozen=True, slots=True)
class MailboxEvent:
    """A row of ``mailbox_pause`` (columns as the query names them)."""

    mailbox_id: int
    created_at: dt.datetime


def mailbox_pause(
    conn: Conn, *, now: dt.datetime | None, reason: str, by: str, mailbox_id: int
) -> list[MailboxEvent]:
    """``mailbox_pause``: pause an active mailbox: claims refuse it until an operator resumes it."""
    return many(
        conn,
        "mailbox_pause",
        {"now": now, "reason": reason, "by": by, "mailbox_id": mailbox_id},
        MailboxEvent,
    )


def mailbox_resume(
    conn: Conn, *, now: dt.datetime | None, mailbox_id: int, by: str, why: str
) -> list[MailboxEvent]:
    """``mailbox_resume``: resume a paused mailbox."""
    return many(
        conn,
        "mailbox_resume",
        {"now": now, "mailbox_id": mailbox_id, "by": by, "why": why},
        MailboxEvent,
    )


@dataclass(frozen=True, slots=True)
class MailboxEventRow:
    """A row of ``mailbox_event_list`` (columns as the query names them)."""

    id: int
    mailbox_id: int
    address: str
    event: str
    actor: str
    reason: str
    created_at: dt.datetime


def mailbox_event_list(conn: Conn, *, mailbox_id: int | None) -> list[MailboxEventRow]:
    """``mailbox_event_list``: The pause/resume history of one mailbox, or of all (%(mailbox_id)s
    NULL), newest first."""
    return many(conn, "mailbox_event_list", {"mailbox_id": mailbox_id}, MailboxEventRow)


@dataclass(frozen=True, slots=True)
class MailboxHealth:
    """A row of ``mailbox_health_list`` (columns as the query names them)."""

    id: int
    address: str
    status: str
    domain: str
    resumed_at: dt.datetime | None


def mailbox_health_list(conn: Conn) -> list[MailboxHealth]:
    """``mailbox_health_list``: every mailbox with its sending domain and its last resume."""
    return many(conn, "mailbox_health_list", {}, MailboxHealth)


@dataclass(frozen=True, slots=True)
class BounceCounts:
    """A row of ``mailbox_bounce_counts`` (columns as the query names them)."""

    id: int
    address: str
    status: str
    since: dt.datetime
    sends: int
    hard_bounces: int
    complaints: int


def mailbox_bounce_counts(
    conn: Conn, *, window: dt.timedelta, now: dt.datetime | None
) -> list[BounceCounts]:
    """``mailbox_bounce_counts``: per mailbox over %(window)s (or since a resume): sends, hard bounces
    and complaints, each counted per address (the definitions: the query's comment)."""
    return many(conn, "mailbox_bounce_counts", {"window": window, "now": now}, BounceCounts)


@dataclass(frozen=True, slots=True)
class MailboxLabel:
    """A row of ``mailbox_names`` (columns as the query names them)."""

    id: int
    label: str
    display_name: str
    address: str


def mailbox_names(conn: Conn) -> list[MailboxLabel]:
    """``mailbox_names``: Every mailbox's label, display name and address (callers name it with
    logutil.mailbox_name)."""
    return many(conn, "mailbox_names", {}, MailboxLabel)


@dataclass(frozen=True, slots=True)
class AutoPause:
    """A row of ``mailbox_auto_pauses`` (columns as the query names them)."""

    id: int
    mailbox_id: int
    actor: str
    reason: str
    created_at: dt.datetime


def mailbox_auto_pauses(conn: Conn) -> list[AutoPause]:
    """``mailbox_auto_pauses``: Automatic pauses (by the spam-rate, bounce-rate or complaint-rate
    rule) of the last 7 days, for their alerts."""
    return many(conn, "mailbox_auto_pauses", {}, AutoPause)
