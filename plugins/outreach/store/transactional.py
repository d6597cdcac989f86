"""Typed calls of ``sql/queries/transactional.sql``, one function per query, named like it.

Transactional mail: the enqueue is the SQL function outreach.enqueue_transactional (migration
0006), so an application that does not use Python calls the same thing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from outreach.store._run import Conn, maybe_one, one


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A row of ``transactional_enqueue`` (columns as the query names them)."""

    email_id: int | None
    created: bool | None
    status: str | None
    message_key: UUID | None


def transactional_enqueue(
    conn: Conn, *, delivery_key: str, recipient: str, template: str, context: Any, mailbox: str
) -> Enqueued:
    """``transactional_enqueue``: Run transactional_enqueue.

    :raises RowMissing: the statement returned no row."""
    return one(
        conn,
        "transactional_enqueue",
        {
            "delivery_key": delivery_key,
            "recipient": recipient,
            "template": template,
            "context": context,
            "mailbox": mailbox,
        },
        Enqueued,
    )


@dataclass(frozen=True, slots=True)
class TransactionalStatus:
    """A row of ``transactional_by_key`` (columns as the query names them)."""

    id: int
    status: str | None
    failure_kind: str | None
    attempts: int
    recipient: str | None
    template: str | None
    last_error: str | None
    idempotency_key: UUID
    message_id: str
    accepted_at: dt.datetime
    log_source: str


def transactional_by_key(conn: Conn, *, delivery_key: str) -> TransactionalStatus | None:
    """``transactional_by_key``: The one row of a delivery key, with its send-log entry when it was
    sent.

    ``None`` when no row matched."""
    return maybe_one(
        conn, "transactional_by_key", {"delivery_key": delivery_key}, TransactionalStatus
    )
