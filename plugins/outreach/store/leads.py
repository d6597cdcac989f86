"""Typed calls of ``sql/queries/leads.sql``, one function per query, named like it.

An import stages the file in a temporary table and applies it in one transaction with set-based
statements; each guard's reason is the query's comment."""

from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import cast

import psycopg

from outreach import db
from outreach.store._run import Conn, execute, many, maybe_one, one, one_value, values


@dataclass(frozen=True, slots=True)
class LeadByAddressRow:
    """A row of ``lead_by_address`` (columns as the query names them)."""

    id: int
    email: str


def lead_by_address(conn: Conn, *, address: str) -> LeadByAddressRow | None:
    """``lead_by_address``: runs lead_by_address.

    ``None`` when no row matched."""
    return maybe_one(conn, "lead_by_address", {"address": address}, LeadByAddressRow)


def lead_stage_create(conn: Conn) -> None:
    """``lead_stage_create``: the stage table, one row per data row of the file, filled by one COPY."""
    execute(conn, "lead_stage_create", {})


def lead_stage_memory(conn: Conn) -> None:
    """``lead_stage_memory``: sorts and hashes of up to 128 MB stay in memory for this transaction."""
    execute(conn, "lead_stage_memory", {})


def lead_stage_index_lines(conn: Conn) -> None:
    """``lead_stage_index_lines``: The stage table's lines, indexed before the COPY: each batch's
    suppression (and the first problems by line) are read by it."""
    execute(conn, "lead_stage_index_lines", {})


def lead_stage_copy(conn: Conn) -> AbstractContextManager[psycopg.Copy]:
    """``lead_stage_copy``: runs lead_stage_copy.

    A COPY ... FROM STDIN: use as ``with lead_stage_copy(conn) as copy: copy.write_row(...)``."""
    return conn.cursor().copy(db.query("lead_stage_copy"))


def lead_stage_copy_keyed(conn: Conn) -> AbstractContextManager[psycopg.Copy]:
    """``lead_stage_copy_keyed``: A source's rows (outreach.sources): the same columns and the
    row's identity.

    A COPY ... FROM STDIN: use as ``with lead_stage_copy_keyed(conn) as copy: copy.write_row(...)``."""
    return conn.cursor().copy(db.query("lead_stage_copy_keyed"))


def lead_stage_analyze(conn: Conn) -> None:
    """``lead_stage_analyze``: statistics for the filled stage table (autovacuum never analyses it)."""
    execute(conn, "lead_stage_analyze", {})


def lead_stage_mark_suppressed(conn: Conn, *, from_line: int | None, to_line: int | None) -> None:
    """``lead_stage_mark_suppressed``: mark the suppressed staged lines %(from_line)s to %(to_line)s."""
    execute(conn, "lead_stage_mark_suppressed", {"from_line": from_line, "to_line": to_line})


def lead_stage_mark_duplicates(conn: Conn) -> None:
    """``lead_stage_mark_duplicates``: in-file duplicates: the first line of each address wins."""
    execute(conn, "lead_stage_mark_duplicates", {})


def lead_stage_mark_campaign_finished(conn: Conn, *, campaign_id: int) -> int:
    """``lead_stage_mark_campaign_finished``: when campaign ``campaign_id`` is finished, give
    every staged line whose lead would be newly enrolled the problem ``not enrolled`` (the lead
    is still stored); return how many lines were marked (0: the campaign is not finished)."""
    return cast("int", one_value(conn, "lead_stage_mark_campaign_finished",
                                 {"campaign_id": campaign_id}, "marked"))


@dataclass(frozen=True, slots=True)
class StageCounts:
    """A row of ``lead_stage_counts`` (columns as the query names them)."""

    duplicate: int
    suppressed: int
    accepted: int | None
    problems: int


def lead_stage_counts(conn: Conn) -> StageCounts:
    """``lead_stage_counts``: accepted rows (on to the upsert) and problem rows."""
    return one(conn, "lead_stage_counts", {}, StageCounts)


@dataclass(frozen=True, slots=True)
class UpsertCounts:
    """A row of ``lead_upsert_staged`` (columns as the query names them)."""

    imported: int
    updated: int


def lead_upsert_staged(conn: Conn) -> UpsertCounts:
    """``lead_upsert_staged``: insert new leads, update known ones only where a field changed."""
    return one(conn, "lead_upsert_staged", {}, UpsertCounts)


@dataclass(frozen=True, slots=True)
class ImportProblem:
    """A row of ``lead_stage_problems`` (columns as the query names them)."""

    line: int
    field: str | None
    reason: str | None
    action: str | None


def lead_stage_problems(conn: Conn, *, limit: int) -> list[ImportProblem]:
    """``lead_stage_problems``: The first %(limit)s problems by line, as ImportResult.problems
    shows them (duplicates included: lead_stage_mark_duplicates made them the row's problem)."""
    return many(conn, "lead_stage_problems", {"limit": limit}, ImportProblem)


def lead_stage_suppressed_lines(conn: Conn, *, limit: int) -> list[int]:
    """``lead_stage_suppressed_lines``: The first %(limit)s suppressed lines (all are counted and
    stored with the run)."""
    return cast("list[int]", values(conn, "lead_stage_suppressed_lines", {"limit": limit}, "line"))


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """A row of ``lead_timeline`` (columns as the query names them)."""

    at: dt.datetime | None
    what: str
    detail: str


def lead_timeline(conn: Conn, *, address: str) -> list[TimelineEntry]:
    """``lead_timeline``: everything that happened to one lead, oldest first."""
    return many(conn, "lead_timeline", {"address": address}, TimelineEntry)


def lead_import_hold_off_erasure(conn: Conn) -> None:
    """``lead_import_hold_off_erasure``: make an erasure wait until the caller's import
    transaction ends (a shared transaction-scoped advisory lock; waits for a running erasure)."""
    one(conn, "lead_import_hold_off_erasure", {}, lambda waited: None)
