"""Typed calls of ``sql/queries/campaigns.sql``, one function per query, named like it.

Campaigns, their sequence steps and mailboxes: written when a reviewed campaign file is synced.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from outreach.store._run import Conn, execute, many, maybe_one, one_value


def campaign_upsert(
    conn: Conn,
    *,
    key: str,
    name: str,
    timezone: str,
    send_days: list[int],
    window_start: dt.time | str,
    window_end: dt.time | str,
    source_file: str,
    stop_on_auto_reply: bool,
    stop_on_domain_reply: bool,
    status: str = "draft",
    overlap: str = "allow",
    content_version: str | None = None,
    fed_by_source: bool = False,
    business_days: bool = False,
    country: str | None = None,
    blackout_dates: list[dt.date] | None = None,
    provider_match: bool = False,
) -> int:
    """``campaign_upsert``: create or update a campaign from its file.

    ``status`` applies only at creation (another ``content_version`` of an active or paused campaign
    goes back to awaiting_approval: trigger ``outreach_campaigns_content_changed``); the calendar
    (0137) and ``provider_match`` (0145) follow the file."""
    return cast(
        "int",
        one_value(
            conn,
            "campaign_upsert",
            {
                "key": key,
                "name": name,
                "timezone": timezone,
                "send_days": send_days,
                "window_start": window_start,
                "window_end": window_end,
                "source_file": source_file,
                "stop_on_auto_reply": stop_on_auto_reply,
                "stop_on_domain_reply": stop_on_domain_reply,
                "status": status,
                "overlap": overlap,
                "content_version": content_version,
                "fed_by_source": fed_by_source,
                "business_days": business_days,
                "country": country,
                "blackout_dates": blackout_dates or [],
                "provider_match": provider_match,
            },
            "id",
        ),
    )


def campaign_mailbox_link(conn: Conn, *, campaign_id: int, mailbox_id: int) -> None:
    """``campaign_mailbox_link``: runs campaign_mailbox_link."""
    execute(conn, "campaign_mailbox_link", {"campaign_id": campaign_id, "mailbox_id": mailbox_id})


def campaign_mailbox_unlink_others(conn: Conn, *, campaign_id: int, mailbox_ids: list[int]) -> None:
    """``campaign_mailbox_unlink_others``: A mailbox removed from the campaign file gets no new
    enrolments; existing rows keep theirs."""
    execute(
        conn,
        "campaign_mailbox_unlink_others",
        {"campaign_id": campaign_id, "mailbox_ids": mailbox_ids},
    )


def campaign_step_upsert(
    conn: Conn,
    *,
    campaign_id: int,
    position: int,
    template: str,
    subject: str,
    delay_days: int,
    requires: list[str],
    thread: bool,
) -> int:
    """``campaign_step_upsert``: Steps are matched by position; editing a step's copy affects
    emails not yet sent."""
    return cast(
        "int",
        one_value(
            conn,
            "campaign_step_upsert",
            {
                "campaign_id": campaign_id,
                "position": position,
                "template": template,
                "subject": subject,
                "delay_days": delay_days,
                "requires": requires,
                "thread": thread,
            },
            "id",
        ),
    )


@dataclass(frozen=True, slots=True)
class Campaign:
    """A row of ``campaign_find`` (columns as the query names them)."""

    id: int
    key: str
    name: str
    status: str
    paused_reason: str | None
    paused_at: dt.datetime | None
    paused_by: str | None
    approved_at: dt.datetime | None
    approved_by: str | None
    content_version: str | None = None
    approved_content_version: str | None = None


def campaign_variant_upsert(
    conn: Conn, *, step_id: int, name: str, position: int, subject: str | None,
    template: str | None, weight: int,
) -> None:
    """``campaign_variant_upsert``: a step's A/B variant from the file, by (step, name), active again."""
    execute(conn, "campaign_variant_upsert", {"step_id": step_id, "name": name,
                                              "position": position, "subject": subject,
                                              "template": template, "weight": weight})


def campaign_variant_retire_others(conn: Conn, *, step_id: int, names: list[str]) -> None:
    """``campaign_variant_retire_others``: retire (never delete) the step's variants not in the file."""
    execute(conn, "campaign_variant_retire_others", {"step_id": step_id, "names": names})


def campaign_find(conn: Conn, *, key: str) -> Campaign | None:
    """``campaign_find``: runs campaign_find.

    ``None`` when no row matched."""
    return maybe_one(conn, "campaign_find", {"key": key}, Campaign)


def campaign_list(conn: Conn) -> list[Campaign]:
    """``campaign_list``: every campaign, by key (rows as :func:`campaign_find`'s)."""
    return many(conn, "campaign_list", {}, Campaign)


@dataclass(frozen=True, slots=True)
class CampaignEventStamp:
    """A row of ``campaign_pause`` (columns as the query names them)."""

    campaign_id: int
    created_at: dt.datetime


def campaign_pause(
    conn: Conn, *, now: dt.datetime | None, reason: str, by: str, campaign_id: int
) -> list[CampaignEventStamp]:
    """``campaign_pause``: pause an active campaign; its queued steps stay queued, unclaimed."""
    return many(
        conn,
        "campaign_pause",
        {"now": now, "reason": reason, "by": by, "campaign_id": campaign_id},
        CampaignEventStamp,
    )


def campaign_resume(
    conn: Conn, *, now: dt.datetime | None, campaign_id: int, by: str, why: str
) -> list[CampaignEventStamp]:
    """``campaign_resume``: Resume a paused campaign: its queued steps may be claimed again, within
    each mailbox's cap and pacing (mailbox_remaining_today). Guarded by status = 'paused'."""
    return many(
        conn,
        "campaign_resume",
        {"now": now, "campaign_id": campaign_id, "by": by, "why": why},
        CampaignEventStamp,
    )


@dataclass(frozen=True, slots=True)
class FinishedCampaign:
    """A row of ``campaign_finish``: a campaign that became ``finished``, and when."""

    campaign_id: int
    key: str
    finished_at: dt.datetime


def campaign_finish(conn: Conn, *, now: dt.datetime | None,
                    campaign_key: str | None) -> list[FinishedCampaign]:
    """``campaign_finish``: finish every active or paused campaign (or ``campaign_key``) whose
    enrolments are all done and nothing is queued, sending or unconfirmed (the rule: the query)."""
    return many(conn, "campaign_finish", {"now": now, "campaign_key": campaign_key},
                FinishedCampaign)


@dataclass(frozen=True, slots=True)
class CampaignEvent:
    """A row of ``campaign_event_list`` (columns as the query names them)."""

    id: int
    campaign_id: int
    key: str
    event: str
    actor: str
    reason: str
    created_at: dt.datetime


def campaign_event_list(conn: Conn, *, campaign_id: int | None) -> list[CampaignEvent]:
    """``campaign_event_list``: The status history (pause, resume, submit, approve, reject) of one campaign, or of all
    (%(campaign_id)s NULL), newest first."""
    return many(conn, "campaign_event_list", {"campaign_id": campaign_id}, CampaignEvent)


def campaign_submit(
    conn: Conn, *, now: dt.datetime | None, campaign_id: int, by: str, reason: str
) -> list[CampaignEventStamp]:
    """``campaign_submit``: draft → awaiting_approval (``[]``: the guard matched no row)."""
    return many(
        conn,
        "campaign_submit",
        {"now": now, "campaign_id": campaign_id, "by": by, "reason": reason},
        CampaignEventStamp,
    )


def campaign_approve(
    conn: Conn, *, now: dt.datetime | None, campaign_id: int, by: str, reason: str,
    content_version: str | None = None,
) -> list[CampaignEventStamp]:
    """``campaign_approve``: awaiting_approval → active, guarded by status and, when given, by
    ``content_version`` still being the campaign's (``[]``: the guard matched no row)."""
    return many(
        conn,
        "campaign_approve",
        {"now": now, "campaign_id": campaign_id, "by": by, "reason": reason,
         "content_version": content_version},
        CampaignEventStamp,
    )


def campaign_reject(
    conn: Conn, *, now: dt.datetime | None, campaign_id: int, by: str, reason: str
) -> list[CampaignEventStamp]:
    """``campaign_reject``: awaiting_approval → draft with the reason (``[]``: the guard matched no row)."""
    return many(
        conn,
        "campaign_reject",
        {"now": now, "campaign_id": campaign_id, "by": by, "reason": reason},
        CampaignEventStamp,
    )


@dataclass(frozen=True, slots=True)
class PreviewRow:
    """A row of ``campaign_preview_rows``: ``email_claim_batch``'s columns (``id`` and
    ``idempotency_key`` ``None`` before the step is queued) and why the step would skip it."""

    id: int | None
    idempotency_key: UUID | None
    email_status: str | None
    attempts: int | None
    lead_id: int
    step_id: int
    message_class: str
    email: str
    first_name: str | None
    last_name: str | None
    company: str | None
    title: str | None
    custom: Any
    step_position: int
    template: str
    subject: str
    variant: str | None
    step_thread: bool
    campaign_key: str
    campaign_name: str
    mailbox_id: int
    mailbox_address: str
    mailbox_name: str
    mailbox_label: str | None
    smtp_conn_id: str
    dkim_selector: str | None
    dkim_key_conn_id: str | None
    enrollment_status: str
    suppressed: bool
    missing: list[str]


def campaign_preview_rows(
    conn: Conn, *, key: str, step: int, address: str | None, limit: int | None
) -> list[PreviewRow]:
    """``campaign_preview_rows``: per enrolled lead (``address``, or the first ``limit``), the row a
    preview builds step ``step`` from: :class:`PreviewRow`."""
    return many(conn, "campaign_preview_rows",
                {"key": key, "step": step, "address": address, "limit": limit}, PreviewRow)


@dataclass(frozen=True, slots=True)
class AwaitingCampaign:
    """A row of ``campaign_awaiting_list`` (columns as the query names them)."""

    id: int
    key: str
    name: str
    status: str
    content_version: str | None
    approved_content_version: str | None
    timezone: str
    send_days: list[int]
    submitted_event_id: int | None
    submitted_by: str | None
    submitted_reason: str | None
    submitted_at: dt.datetime | None


def campaign_awaiting_list(conn: Conn, *, key: str | None) -> list[AwaitingCampaign]:
    """``campaign_awaiting_list``: the campaigns awaiting approval (or the one named ``key``)
    with their latest 'submitted' history row."""
    return many(conn, "campaign_awaiting_list", {"key": key}, AwaitingCampaign)


@dataclass(frozen=True, slots=True)
class CampaignMailboxDay:
    """A row of ``campaign_mailbox_days`` (columns as the query names them)."""

    mailbox_id: int
    address: str
    display_name: str | None
    label: str | None
    status: str
    dkim_selector: str | None
    dkim_key_conn_id: str | None
    day_index: int
    day: dt.date
    daily_limit: int


def campaign_mailbox_days(conn: Conn, *, campaign_id: int, days: int,
                          now: dt.datetime | None) -> list[CampaignMailboxDay]:
    """``campaign_mailbox_days``: each mailbox of the campaign and what it may send on each of
    the next ``days`` local days (``outreach.mailbox_daily_limit``: cap and warm-up)."""
    return many(conn, "campaign_mailbox_days", {"campaign_id": campaign_id, "days": days,
                                                "now": now}, CampaignMailboxDay)
