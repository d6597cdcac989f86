"""Typed calls of ``sql/queries/erasures.sql``, one function per query, named like it.

Erasure (outreach.erasure): ``outreach.erase_person_v1`` does the whole erasure in the caller's
transaction (migration 0129 lists every table it touches).
"""

from __future__ import annotations

from dataclasses import dataclass

from outreach.store._run import Conn, one


@dataclass(frozen=True, slots=True)
class Erased:
    """A row of ``erasure_erase_person``: the ``outreach.erasures`` id and the rows changed per
    table (``{table: count}``)."""

    erasure_id: int
    counts: dict[str, int]


def erasure_erase_person(conn: Conn, *, forms: list[str], actor: str, reason: str) -> Erased:
    """``erasure_erase_person``: erase the person whose address is spelled ``forms`` (normal
    form first); return the ``outreach.erasures`` id and the rows changed per table."""
    row = one(conn, "erasure_erase_person", {"forms": forms, "actor": actor, "reason": reason},
              Erased)
    return Erased(row.erasure_id, {k: int(v) for k, v in row.counts.items()})


def erasure_wait_for_imports(conn: Conn) -> None:
    """``erasure_wait_for_imports``: wait for the lead imports in flight and hold new ones off
    until the caller's transaction ends (a transaction-scoped advisory lock)."""
    one(conn, "erasure_wait_for_imports", {}, lambda waited: None)
