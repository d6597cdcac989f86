"""Typed calls of ``sql/queries/suppressions.sql``, one function per query, named like it.

Suppressions. Whether an address is suppressed is decided only by outreach.is_suppressed().
Every suppression added or removed is recorded in outreach.suppression_events by a trigger
(migration 0003).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from outreach.store._run import Conn, execute, maybe_one, one_value, values


def suppression_insert(conn: Conn, *, kind: str, value: str, reason: str, source: str) -> list[int]:
    """``suppression_insert``: runs suppression_insert."""
    return cast(
        "list[int]",
        values(
            conn,
            "suppression_insert",
            {"kind": kind, "value": value, "reason": reason, "source": source},
            "id",
        ),
    )


def suppression_check(conn: Conn, *, address: str, message_class: str) -> bool:
    """``suppression_check``: runs suppression_check."""
    return cast(
        "bool",
        one_value(
            conn,
            "suppression_check",
            {"address": address, "message_class": message_class},
            "suppressed",
        ),
    )


def suppression_actor_set(conn: Conn, *, actor: str, note: str) -> None:
    """``suppression_actor_set``: Who is acting and why, for the history rows the trigger writes in
    this transaction (transaction-local settings: they vanish at commit or rollback)."""
    execute(conn, "suppression_actor_set", {"actor": actor, "note": note})


@dataclass(frozen=True, slots=True)
class Suppression:
    """A row of ``suppression_remove`` (columns as the query names them)."""

    id: int
    kind: str
    value: str
    reason: str
    source: str
    created_at: dt.datetime


def suppression_remove(conn: Conn, *, kind: str, value: str) -> Suppression | None:
    """``suppression_remove``: remove the active suppression (``None``: none)."""
    return maybe_one(conn, "suppression_remove", {"kind": kind, "value": value}, Suppression)
