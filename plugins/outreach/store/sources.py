"""Typed calls of ``sql/queries/sources.sql``, one function per query, named like it.

Lead sources (outreach.source_rows, outreach.source_objects): which source row names which lead,
and which object of a source a run has taken. Run inside the import's transaction, after the
stage table is filled (leads.sql).
"""

from __future__ import annotations

from typing import cast

from outreach.store._run import Conn, execute, maybe_value, one_value


def source_rows_record(conn: Conn, *, campaign_id: int, run_id: int) -> None:
    """``source_rows_record``: A source's run saw these rows: each valid row's identity now names
    its lead (then source_rows_seen)."""
    execute(conn, "source_rows_record", {"campaign_id": campaign_id, "run_id": run_id})


def source_rows_seen(conn: Conn, *, run_id: int, campaign_id: int) -> None:
    """``source_rows_seen``: mark every row the run returned as seen by this run."""
    execute(conn, "source_rows_seen", {"run_id": run_id, "campaign_id": campaign_id})


def source_rows_stop_missing(
    conn: Conn, *, reason: str, by: str, campaign_id: int, run_id: int
) -> int:
    """``source_rows_stop_missing``: stop the active enrolments of leads whose row this run missed."""
    return cast(
        "int",
        one_value(
            conn,
            "source_rows_stop_missing",
            {"reason": reason, "by": by, "campaign_id": campaign_id, "run_id": run_id},
            "stopped",
        ),
    )


def source_object_claim(
    conn: Conn, *, campaign_key: str, source: str, path: str, version: str
) -> int | None:
    """``source_object_claim``: claim a file source's object, imported once (``None``: taken)."""
    return cast(
        "int | None",
        maybe_value(
            conn,
            "source_object_claim",
            {"campaign_key": campaign_key, "source": source, "path": path, "version": version},
            "id",
        ),
    )


def source_object_done(conn: Conn, *, run_id: int, id: int) -> None:
    """``source_object_done``: runs source_object_done."""
    execute(conn, "source_object_done", {"run_id": run_id, "id": id})
