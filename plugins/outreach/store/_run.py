"""How a store function runs its named query (``outreach.db``) and shapes the rows.

Rows come back from :func:`outreach.db.run` as dicts keyed by column name; each shape below turns
them into what the caller's function promises: a frozen dataclass per row (``one``, ``maybe_one``,
``many``), one column's value (``one_value``, ``maybe_value``, ``values``) or nothing
(``execute``). A query whose row must exist raises :class:`RowMissing` instead of returning
``None`` for the caller to index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import psycopg

from outreach import db

Conn = psycopg.Connection[Any]
"""A psycopg 3 connection from :func:`outreach.db.connect` (rows as dicts, which the runners
below read by column name; ``transactional_enqueue`` alone takes any row factory)."""

T = TypeVar("T")
Params = Mapping[str, object]


class RowMissing(LookupError):
    """A statement that must return a row returned none.

    :param name: the query's name (``sql/queries/*.sql``).
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"{name}: the statement returned no row")
        self.name = name


def _rows(conn: Conn, name: str, params: Params) -> list[dict[str, Any]]:
    return db.run(conn, name, dict(params))


def _build(make: Callable[..., T], row: Mapping[str, Any]) -> T:
    # A column named like a Python keyword (``class``) is the field ``class_``.
    return make(**{(k + "_" if k in _KEYWORDS else k): v for k, v in row.items()})


_KEYWORDS = frozenset({"class", "from", "in", "is", "not", "and", "or", "for", "if", "else"})


def execute(conn: Conn, name: str, params: Params) -> None:
    """Run the named query and ignore whatever it returns.

    :raises outreach.db.OutreachDBError: a constraint was violated.
    """
    _rows(conn, name, params)


def many(conn: Conn, name: str, params: Params, make: Callable[..., T]) -> list[T]:
    """Run the named query; one ``make(**row)`` per row, in the query's order."""
    return [_build(make, r) for r in _rows(conn, name, params)]


def maybe_one(conn: Conn, name: str, params: Params, make: Callable[..., T]) -> T | None:
    """Run the named query; its first row as ``make(**row)``, or ``None`` when it returned none."""
    rows = _rows(conn, name, params)
    return _build(make, rows[0]) if rows else None


def one(conn: Conn, name: str, params: Params, make: Callable[..., T]) -> T:
    """Run the named query; its first row as ``make(**row)``.

    :raises RowMissing: the statement returned no row.
    """
    rows = _rows(conn, name, params)
    if not rows:
        raise RowMissing(name)
    return _build(make, rows[0])


def values(conn: Conn, name: str, params: Params, column: str) -> list[Any]:
    """Run the named query; the value of ``column`` in each row."""
    return [r[column] for r in _rows(conn, name, params)]


def maybe_value(conn: Conn, name: str, params: Params, column: str) -> Any:
    """Run the named query; ``column`` of its first row, or ``None`` when it returned none."""
    rows = _rows(conn, name, params)
    return rows[0][column] if rows else None


def one_value(conn: Conn, name: str, params: Params, column: str) -> Any:
    """Run the named query; ``column`` of its first row.

    :raises RowMissing: the statement returned no row.
    """
    rows = _rows(conn, name, params)
    if not rows:
        raise RowMissing(name)
    return rows[0][column]
