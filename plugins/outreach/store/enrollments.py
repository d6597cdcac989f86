"""Typed calls of ``sql/queries/enrollments.sql``, one function per query, named like it.

Enrolments: stopping one (an operator, a reply) and the pre-send check that honours a stop. The
stop itself is the SQL function outreach.stop_enrollment (migration 0012): it stops the
enrolment and cancels every queued step of it in the caller's transaction.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from outreach.store._run import Conn, many, maybe_one, one, one_value


@dataclass(frozen=True, slots=True)
class Enrollment:
    """A row of ``enrollment_find`` (columns as the query names them)."""

    id: int
    status: str
    stopped_at: dt.datetime | None
    stopped_by: str | None
    stop_reason: str | None
    lead_id: int
    campaign_id: int
    email: str
    campaign_key: str


def enrollment_find(conn: Conn, *, email: str, campaign_key: str) -> Enrollment | None:
    """``enrollment_find``: a lead's enrolment in a campaign, locked (``None``: no row)."""
    return maybe_one(
        conn, "enrollment_find", {"email": email, "campaign_key": campaign_key}, Enrollment
    )


def enrollment_stop(conn: Conn, *, enrollment_id: int, status: str, reason: str, by: str) -> int:
    """``enrollment_stop``: Stop one enrolment ('stopped' or 'replied') and cancel its queued
    steps; returns how many."""
    return cast(
        "int",
        one_value(
            conn,
            "enrollment_stop",
            {"enrollment_id": enrollment_id, "status": status, "reason": reason, "by": by},
            "cancelled",
        ),
    )


@dataclass(frozen=True, slots=True)
class ActiveEnrollment:
    """A row of ``enrollment_active_for_lead`` (columns as the query names them)."""

    id: int
    campaign_id: int
    lead_id: int
    mailbox_id: int
    campaign_key: str
    stop_on_auto_reply: bool
    stop_on_domain_reply: bool


def enrollment_active_for_lead(
    conn: Conn, *, campaign_id: int | None, mailbox_id: int | None, lead_id: int
) -> list[ActiveEnrollment]:
    """``enrollment_active_for_lead``: a lead's active enrolments, with the campaigns' inbound rules."""
    return many(
        conn,
        "enrollment_active_for_lead",
        {"campaign_id": campaign_id, "mailbox_id": mailbox_id, "lead_id": lead_id},
        ActiveEnrollment,
    )


@dataclass(frozen=True, slots=True)
class DomainEnrollment:
    """A row of ``enrollment_active_same_domain`` (columns as the query names them)."""

    id: int
    lead_id: int
    email: str


def enrollment_active_same_domain(
    conn: Conn, *, domain: str, campaign_id: int, lead_id: int
) -> list[DomainEnrollment]:
    """``enrollment_active_same_domain``: Every other active enrolment of a campaign whose lead has
    an address at %(domain)s (stop_on_domain_reply: a colleague answered)."""
    return many(
        conn,
        "enrollment_active_same_domain",
        {"domain": domain, "campaign_id": campaign_id, "lead_id": lead_id},
        DomainEnrollment,
    )


@dataclass(frozen=True, slots=True)
class EnrolCounts:
    """A row of ``enrollment_insert_staged``: new active enrolments, and those made stopped by
    the campaign's overlap 'skip'."""

    enrolled: int
    skipped: int


def enrollment_insert_staged(conn: Conn, *, campaign_id: int, now: dt.datetime | None
                             ) -> EnrolCounts:
    """``enrollment_insert_staged``: enrol every staged, unsuppressed lead (round-robin mailboxes; an
    enrolled lead keeps its own; overlap 'skip' enrols stopped, 0134)."""
    return one(conn, "enrollment_insert_staged", {"campaign_id": campaign_id, "now": now},
               EnrolCounts)
