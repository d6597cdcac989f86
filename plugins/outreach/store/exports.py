"""Typed calls of ``sql/queries/exports.sql``, one function per query, named like it.

The warehouse export (:mod:`outreach.export`): a cursor per target, moved by guarded UPDATEs
(migration 0131). Transaction ids (``xid8``) travel as their decimal text.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from outreach.store._run import Conn, execute, many, maybe_value, one


@dataclass(frozen=True)
class ExportCursor:
    """One target's position: the last event it has (``done_xact``, ``done_id``), the last of the
    batch being written (``planned_*``, ``None`` when none) and the events written so far."""

    target: str
    done_xact: str
    done_id: int
    planned_xact: str | None
    planned_id: int | None
    exported: int


@dataclass(frozen=True)
class ExportEvent:
    """One row of ``outreach.events`` as the export reads it (``xact`` as decimal text)."""

    id: int
    kind: str
    occurred_at: dt.datetime
    xact: str
    campaign_id: int | None
    lead_id: int | None
    email_id: int | None
    payload: dict[str, Any]


def export_cursor_ensure(conn: Conn, *, target: str) -> None:
    """``export_cursor_ensure``: create the target's cursor at the start of the log if missing.

    :raises outreach.db.OutreachDBError: the name breaks ``outreach_export_cursors_target_check``.
    """
    execute(conn, "export_cursor_ensure", {"target": target})


def export_cursor_try_lock(conn: Conn, *, target: str) -> bool:
    """``export_cursor_try_lock``: take the cursor's lock for ``conn``'s session; ``False`` when
    another session holds it. ``conn`` must stay open (and idle) while the lock is needed."""
    return bool(maybe_value(conn, "export_cursor_try_lock", {"target": target}, "locked"))


def export_cursor_get(conn: Conn, *, target: str) -> ExportCursor:
    """``export_cursor_get``: the target's cursor.

    :raises outreach.store.RowMissing: :func:`export_cursor_ensure` was not run for it.
    """
    return one(conn, "export_cursor_get", {"target": target}, ExportCursor)


def export_events_next(conn: Conn, *, after_xact: str, after_id: int,
                       batch: int) -> list[ExportEvent]:
    """``export_events_next``: at most ``batch`` final events after the position, in order."""
    return many(conn, "export_events_next",
                {"after_xact": after_xact, "after_id": after_id, "batch": batch}, ExportEvent)


def export_events_planned(conn: Conn, *, after_xact: str, after_id: int, upto_xact: str,
                          upto_id: int) -> list[ExportEvent]:
    """``export_events_planned``: the events after the position up to the planned last one."""
    return many(conn, "export_events_planned",
                {"after_xact": after_xact, "after_id": after_id, "upto_xact": upto_xact,
                 "upto_id": upto_id}, ExportEvent)


def export_cursor_plan(conn: Conn, *, target: str, after_xact: str, after_id: int,
                       upto_xact: str, upto_id: int) -> bool:
    """``export_cursor_plan``: record the batch ending at (``upto_xact``, ``upto_id``) as being
    written; ``False`` when the cursor is no longer where this run read it (another run moved it
    or planned first)."""
    return maybe_value(conn, "export_cursor_plan",
                       {"target": target, "after_xact": after_xact, "after_id": after_id,
                        "upto_xact": upto_xact, "upto_id": upto_id}, "target") is not None


def export_cursor_advance(conn: Conn, *, target: str, after_xact: str, after_id: int,
                          upto_xact: str, upto_id: int, count: int) -> bool:
    """``export_cursor_advance``: the planned batch (``count`` events) is written; make its last
    event the position. ``False`` when another run advanced it first."""
    return maybe_value(conn, "export_cursor_advance",
                       {"target": target, "after_xact": after_xact, "after_id": after_id,
                        "upto_xact": upto_xact, "upto_id": upto_id, "count": count},
                       "target") is not None


def export_cursor_ensure_at_end(conn: Conn, *, target: str) -> None:
    """``export_cursor_ensure_at_end``: create the target's cursor, if missing, at the last final
    event more than a day old (a consumer that acts on at most a day of the past).

    :raises outreach.db.OutreachDBError: the name breaks ``outreach_export_cursors_target_check``.
    """
    execute(conn, "export_cursor_ensure_at_end", {"target": target})
