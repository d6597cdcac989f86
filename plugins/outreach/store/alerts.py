"""Typed calls of ``sql/queries/alerts.sql``, one function per query, named like it.

Operator alerts (outreach.alerts): deduplicated by a UNIQUE event key, so an event alerts once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from outreach.store._run import Conn, execute, many, values


def alert_claim_many(
    conn: Conn, *, kind: str, subject: str, body: str, event_keys: list[str]
) -> list[str]:
    """``alert_claim_many``: Whoever inserts an event key sends its alert; everyone else gets no
    row. One alert may cover many events (a run's new unconfirmed emails: one key each); returns
    the keys that were new. Run inside the transaction that delivers the alert: a concurrent
    claim of the same key waits on the unique index until that transaction ends (then gets
    nothing), and a failed delivery rolls back so the next run tries again."""
    return cast(
        "list[str]",
        values(
            conn,
            "alert_claim_many",
            {"kind": kind, "subject": subject, "body": body, "event_keys": event_keys},
            "event_key",
        ),
    )


def alert_describe(conn: Conn, *, subject: str, body: str, event_keys: list[str]) -> None:
    """``alert_describe``: What the alert said, once it is composed from the new keys."""
    execute(conn, "alert_describe", {"subject": subject, "body": body, "event_keys": event_keys})


@dataclass(frozen=True, slots=True)
class Alert:
    """A row of ``alert_list`` (columns as the query names them)."""

    id: int
    event_key: str
    kind: str
    subject: str
    body: str
    created_at: dt.datetime


def alert_list(conn: Conn) -> list[Alert]:
    """``alert_list``: runs alert_list."""
    return many(conn, "alert_list", {}, Alert)


def alert_keys_absent(conn: Conn, *, event_keys: list[str]) -> list[str]:
    """``alert_keys_absent``: Which of these event keys no alert (or Required Action) has claimed
    yet, in the order given: the send run's after_send updates the review asset while any
    unconfirmed email is not listed by a Required Action (key review:<id>), so a review run
    missed while its DAG was paused is caught up by the next send run."""
    return cast("list[str]", values(conn, "alert_keys_absent", {"event_keys": event_keys},
                                    "event_key"))
