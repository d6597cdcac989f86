"""Typed calls of ``sql/queries/retention.sql``, one function per query, named like it.

Retention (outreach.retention): personal content older than its limit is blanked in batches,
each batch its own transaction; the rows and their UNIQUE keys stay (migration 0125).
"""

from __future__ import annotations

import datetime as dt
from typing import cast

from outreach.store._run import Conn, values


def retention_purge_inbound(conn: Conn, *, days: int, batch: int,
                            now: dt.datetime | None = None) -> list[int]:
    """``retention_purge_inbound``: blank one batch (at most ``batch`` rows) of inbound messages
    recorded more than ``days`` days before ``now`` (UTC; default the database's now); return
    their ids."""
    return cast("list[int]", values(conn, "retention_purge_inbound",
                                    {"days": days, "batch": batch, "now": now}, "id"))


def retention_purge_import_problems(conn: Conn, *, days: int, batch: int,
                                    now: dt.datetime | None = None) -> list[int]:
    """``retention_purge_import_problems``: empty the problem lines of one batch (at most
    ``batch``) of import runs created more than ``days`` days before ``now`` (UTC; default the
    database's now); return their ids."""
    return cast("list[int]", values(conn, "retention_purge_import_problems",
                                    {"days": days, "batch": batch, "now": now}, "id"))
