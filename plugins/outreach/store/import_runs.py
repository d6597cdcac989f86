"""Typed calls of ``sql/queries/import_runs.sql``, one function per query, named like it.

Import runs (outreach.import_runs): one row per imported file with its counts and its first
problems, built from the import's stage table (leads.sql).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, cast

from outreach.store._run import Conn, many, maybe_one, one_value


def import_run_insert_staged(
    conn: Conn,
    *,
    stored: int,
    kind: str,
    file: str,
    campaign_key: str,
    rows_total: int,
    imported: int,
    updated: int,
    duplicate: int,
    unchanged: int,
    invalid: int,
    suppressed: int,
    enrolled: int,
) -> int:
    """``import_run_insert_staged``: the run's row, with at most %(stored)s problems from the stage table."""
    return cast(
        "int",
        one_value(
            conn,
            "import_run_insert_staged",
            {
                "stored": stored,
                "kind": kind,
                "file": file,
                "campaign_key": campaign_key,
                "rows_total": rows_total,
                "imported": imported,
                "updated": updated,
                "duplicate": duplicate,
                "unchanged": unchanged,
                "invalid": invalid,
                "suppressed": suppressed,
                "enrolled": enrolled,
            },
            "id",
        ),
    )


@dataclass(frozen=True, slots=True)
class ImportRun:
    """A row of ``import_run_get`` (columns as the query names them)."""

    id: int
    kind: str
    file: str
    campaign_key: str | None
    rows_total: int
    imported: int
    updated: int
    unchanged: int
    duplicate: int
    invalid: int
    suppressed: int
    enrolled: int
    problems_omitted: int
    problems_stored: int | None
    created_at: dt.datetime


def import_run_get(conn: Conn, *, id: int) -> ImportRun | None:
    """``import_run_get``: one import run, without its problem list (``None``: no row)."""
    return maybe_one(conn, "import_run_get", {"id": id}, ImportRun)


@dataclass(frozen=True, slots=True)
class ImportProblem:
    """A row of ``import_run_problems_page`` (columns as the query names them)."""

    line: int | None
    field: str | None
    reason: str | None
    action: str | None


def import_run_problems_page(
    conn: Conn, *, id: int, limit: int, offset: int
) -> list[ImportProblem]:
    """``import_run_problems_page``: One page of a run's stored problems, in stored order (by line,
    suppressed lines last)."""
    return many(
        conn,
        "import_run_problems_page",
        {"id": id, "limit": limit, "offset": offset},
        ImportProblem,
    )


@dataclass(frozen=True, slots=True)
class ImportRunSummary:
    """A row of ``import_run_latest`` (columns as the query names them)."""

    id: int
    kind: str
    file: str
    campaign_key: str | None
    rows_total: int
    imported: int
    updated: int
    duplicate: int
    invalid: int
    suppressed: int
    enrolled: int
    problems: Any
    created_at: dt.datetime
    unchanged: int
    problems_omitted: int
    problems_purged_at: dt.datetime | None  # retention (outreach.retention)


def import_run_latest(conn: Conn, *, kind: str) -> ImportRunSummary | None:
    """``import_run_latest``: runs import_run_latest.

    ``None`` when no row matched."""
    return maybe_one(conn, "import_run_latest", {"kind": kind}, ImportRunSummary)
