"""Typed calls of ``sql/queries/postmaster.sql``, one function per query, named like it.

Google Postmaster Tools figures: stored one row per domain / metric (/ feedback loop) / day.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from outreach.store._run import Conn, many


@dataclass(frozen=True, slots=True)
class SendingDomain:
    """A row of ``postmaster_domain_list`` (columns as the query names them)."""

    domain: str
    mailbox_ids: list[int]


def postmaster_domain_list(conn: Conn) -> list[SendingDomain]:
    """``postmaster_domain_list``: The sending domains (the From domain of each mailbox) and their
    mailboxes' ids."""
    return many(conn, "postmaster_domain_list", {}, SendingDomain)


@dataclass(frozen=True, slots=True)
class StoredStat:
    """A row of ``postmaster_stat_upsert`` (columns as the query names them)."""

    metric: str
    feedback_loop_id: str
    day: dt.date
    has_data: bool


def postmaster_stat_upsert(
    conn: Conn,
    *,
    now: dt.datetime | None,
    domain: str,
    metrics: list[str],
    feedback_loop_ids: list[str],
    days: list[dt.date],
    values: list[float | None],
) -> list[StoredStat]:
    """``postmaster_stat_upsert``: store one query's days; a day left out is unknown, never 0 percent."""
    return many(
        conn,
        "postmaster_stat_upsert",
        {
            "now": now,
            "domain": domain,
            "metrics": metrics,
            "feedback_loop_ids": feedback_loop_ids,
            "days": days,
            "values": values,
        },
        StoredStat,
    )


@dataclass(frozen=True, slots=True)
class LatestStat:
    """A row of ``postmaster_stat_latest_known`` (columns as the query names them)."""

    domain: str
    metric: str
    feedback_loop_id: str
    day: dt.date
    value: float | None
    updated_at: dt.datetime


def postmaster_stat_latest_known(conn: Conn) -> list[LatestStat]:
    """``postmaster_stat_latest_known``: The latest day WITH data of every domain / metric /
    feedback loop: unknown days are skipped, not read as 0 percent."""
    return many(conn, "postmaster_stat_latest_known", {}, LatestStat)


@dataclass(frozen=True, slots=True)
class StoredCompliance:
    """A row of ``postmaster_compliance_upsert`` (columns as the query names them)."""

    domain: str
    day: dt.date


def postmaster_compliance_upsert(
    conn: Conn, *, now: dt.datetime | None, domain: str, needs_work: list[str], status: Any
) -> list[StoredCompliance]:
    """``postmaster_compliance_upsert``: runs postmaster_compliance_upsert."""
    return many(
        conn,
        "postmaster_compliance_upsert",
        {"now": now, "domain": domain, "needs_work": needs_work, "status": status},
        StoredCompliance,
    )
