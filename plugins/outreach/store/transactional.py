"""Typed calls of ``sql/queries/transactional.sql``, one function per query, named like it.

Transactional mail: the enqueue is the SQL function outreach.enqueue_transactional (migration
0006), so an application that does not use Python calls the same thing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.rows import dict_row

from outreach import db
from outreach.store._run import Conn, RowMissing, maybe_one


@dataclass(frozen=True, slots=True)
class EnqueuedRow:
    """What ``transactional_enqueue`` returns: the delivery key's one email row (``email_id``),
    whether this call ``created`` it, its ``status`` and its ``message_key``."""

    email_id: int
    created: bool
    status: str
    message_key: UUID


def transactional_enqueue(
    conn: Conn,
    *,
    delivery_key: str,
    recipient: str,
    template: str,
    context: Any,
    mailbox: str | None,
) -> EnqueuedRow:
    """``transactional_enqueue``: enqueue once per delivery key (outreach.enqueue_transactional).

    Runs on a cursor of its own with dict rows, so the caller's connection may use any row
    factory, and lets psycopg's errors through unmapped (the function raises UniqueViolation
    for a key reused for another request, NoDataFound / InvalidParameterValue for a mailbox).

    :param context: the template's variables, wrapped for jsonb (``psycopg.types.json.Jsonb``).
    :raises RowMissing: the function returned no row (it always returns one)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            db.query("transactional_enqueue"),
            {
                "delivery_key": delivery_key,
                "recipient": recipient,
                "template": template,
                "context": context,
                "mailbox": mailbox,
            },
        ).fetchone()
    if row is None:
        raise RowMissing("transactional_enqueue")
    return EnqueuedRow(**row)


@dataclass(frozen=True, slots=True)
class TransactionalStatus:
    """A row of ``transactional_by_key`` (columns as the query names them)."""

    id: int
    status: str
    failure_kind: str | None
    attempts: int
    recipient: str | None
    template: str | None
    last_error: str | None
    idempotency_key: UUID
    message_id: str | None
    accepted_at: dt.datetime | None
    log_source: str | None


def transactional_by_key(conn: Conn, *, delivery_key: str) -> TransactionalStatus | None:
    """``transactional_by_key``: the one row of a delivery key, with its send log (``None``: no row)."""
    return maybe_one(
        conn, "transactional_by_key", {"delivery_key": delivery_key}, TransactionalStatus
    )
