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
    """``alert_claim_many``: whoever inserts an event key sends its alert; everyone else gets no row."""
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
    """``alert_keys_absent``: which of these event keys no alert (or Required Action) has claimed yet."""
    return cast("list[str]", values(conn, "alert_keys_absent", {"event_keys": event_keys},
                                    "event_key"))
