"""Typed calls of ``sql/queries/reports.sql``, one function per query, named like it.

Read-only queries for the report.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from outreach.store._run import Conn, execute, many, one


def report_jit_off(conn: Conn) -> None:
    """``report_jit_off``: The report's queries run without PostgreSQL's JIT (on the report's own
    connection): on the demo data JIT compiling report_mailbox_days cost 1,371 ms of a query that
    runs in 1.1 ms without it (issue 30). Call first on the report's connection."""
    execute(conn, "report_jit_off", {})


@dataclass(frozen=True, slots=True)
class StepReport:
    """A row of ``report_by_step`` (columns as the query names them)."""

    campaign: str
    step: int | None
    template: str | None
    mailbox_id: int
    queued: int
    sending: int
    sent: int
    failed: int | None
    unconfirmed: int
    suppressed: int
    cancelled: int
    failed_reasons: str | None
    failure_reasons: str | None = None


def report_by_step(conn: Conn) -> list[StepReport]:
    """``report_by_step``: Per campaign, step and mailbox; transactional mail as campaign
    'transactional', per template (step NULL)."""
    return many(conn, "report_by_step", {}, StepReport)


@dataclass(frozen=True, slots=True)
class MailboxReport:
    """A row of ``report_mailboxes`` (columns as the query names them)."""

    id: int
    address: str
    status: str
    paused_reason: str | None
    transactional: bool
    daily_limit: int
    used_today: int
    sent_total: int


def report_mailboxes(conn: Conn, *, now: dt.datetime | None) -> list[MailboxReport]:
    """``report_mailboxes``: runs report_mailboxes."""
    return many(conn, "report_mailboxes", {"now": now}, MailboxReport)


@dataclass(frozen=True, slots=True)
class Totals:
    """A row of ``report_totals`` (columns as the query names them)."""

    send_log: int
    emails: int
    sent: int
    leads: int


def report_totals(conn: Conn) -> Totals:
    """``report_totals``: runs report_totals."""
    return one(conn, "report_totals", {}, Totals)


@dataclass(frozen=True, slots=True)
class MailboxCount:
    """A row of ``report_sent_per_mailbox`` (columns as the query names them)."""

    address: str
    n: int


def report_sent_per_mailbox(conn: Conn) -> list[MailboxCount]:
    """``report_sent_per_mailbox``: Send-log entries per mailbox address (the demo compares them
    before and after a run)."""
    return many(conn, "report_sent_per_mailbox", {}, MailboxCount)


@dataclass(frozen=True, slots=True)
class StatusCount:
    """A row of ``report_email_status_counts`` (columns as the query names them)."""

    status: str
    n: int


def report_email_status_counts(conn: Conn) -> list[StatusCount]:
    """``report_email_status_counts``: runs report_email_status_counts."""
    return many(conn, "report_email_status_counts", {}, StatusCount)


@dataclass(frozen=True, slots=True)
class MissingFields:
    """A row of ``report_missing_fields`` (columns as the query names them)."""

    campaign: str
    step: int
    missing: str | None
    leads: int


def report_missing_fields(conn: Conn, *, campaign_key: str | None) -> list[MissingFields]:
    """``report_missing_fields``: leads a step is not queued for, lacking a field the step requires."""
    return many(conn, "report_missing_fields", {"campaign_key": campaign_key}, MissingFields)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A row of ``report_waiting`` (columns as the query names them)."""

    campaign: str
    step: int
    reason: str
    emails: int
    next_at: dt.datetime


def report_waiting(conn: Conn, *, campaign_key: str | None) -> list[Waiting]:
    """``report_waiting``: queued rows the contact policy holds back, per campaign, step and
    ``hold_reason``, with how many and when the first may go (UTC)."""
    return many(conn, "report_waiting", {"campaign_key": campaign_key}, Waiting)


@dataclass(frozen=True, slots=True)
class FunnelStep:
    """A row of ``report_funnel`` (columns as the query names them)."""

    campaign: str
    step: int
    variant: str | None
    enrolled: int
    queued: int
    sent: int
    replied: int
    bounced: int
    unsubscribed: int
    unconfirmed: int
    failed: int
    complained: int = 0
    sender_blocked: int = 0
    stopped_domain_reply: int = 0
    stopped_auto_reply: int = 0


def report_funnel(conn: Conn, *, by_variant: bool = False) -> list[FunnelStep]:
    """``report_funnel``: per campaign and step, the funnel the campaign page draws (each count's rule:
    the query's comment); ``by_variant``: a row per A/B variant too."""
    return many(conn, "report_funnel", {"by_variant": by_variant}, FunnelStep)


@dataclass(frozen=True, slots=True)
class MailboxDay:
    """A row of ``report_mailbox_days`` (columns as the query names them)."""

    mailbox_id: int
    day: dt.date
    daily_cap: int
    daily_limit: int
    sent: int
    spam_rate: float | None


def report_mailbox_days(conn: Conn, *, days: int, now: dt.datetime | None) -> list[MailboxDay]:
    """``report_mailbox_days``: per mailbox and local day of the last %(days)s days: sends, cap, limit."""
    return many(conn, "report_mailbox_days", {"days": days, "now": now}, MailboxDay)


@dataclass(frozen=True, slots=True)
class MailboxHealthReport:
    """A row of ``report_mailbox_health`` (columns as the query names them)."""

    id: int
    label: str
    display_name: str
    address: str
    status: str
    paused_by: str | None
    paused_at: dt.datetime | None
    paused_reason: str | None
    sends: int
    hard_bounces: int
    complaints: int


def report_mailbox_health(
    conn: Conn, *, window: dt.timedelta, now: dt.datetime | None
) -> list[MailboxHealthReport]:
    """``report_mailbox_health``: per mailbox over %(window)s: sends, hard bounces, complaints, pause."""
    return many(conn, "report_mailbox_health", {"window": window, "now": now}, MailboxHealthReport)


@dataclass(frozen=True, slots=True)
class InboundCount:
    """A row of ``report_inbound_counts`` (columns as the query names them)."""

    class_: str
    reason: str
    n: int
    applied: int


def report_inbound_counts(conn: Conn) -> list[InboundCount]:
    """``report_inbound_counts``: inbound mail by class and reason, and how many of each changed
    something."""
    return many(conn, "report_inbound_counts", {}, InboundCount)


@dataclass(frozen=True, slots=True)
class CampaignProgress:
    """A row of ``report_campaign_progress`` (columns as the query names them)."""

    campaign: str
    name: str
    status: str
    mailbox_id: int | None
    sent: int
    queued: int


def report_campaign_progress(conn: Conn) -> list[CampaignProgress]:
    """``report_campaign_progress``: per campaign and mailbox: sent, queued, name and status."""
    return many(conn, "report_campaign_progress", {}, CampaignProgress)
