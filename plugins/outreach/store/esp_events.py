"""Typed calls of ``sql/queries/esp_events.sql``, one function per query, named like it.

ESP webhook events (:mod:`outreach.esp`): the table's rules are in migration 0100. Each event is
recorded and applied in one transaction; the UNIQUE key decides whether it is applied at all.
"""

from __future__ import annotations

import datetime as dt
from typing import cast

from outreach.store._run import Conn, execute, maybe_value


def esp_event_insert(conn: Conn, *, provider: str, event_id: str, recipient: str, kind: str,
                     message_id: str | None, email_id: int | None, status: str | None,
                     diagnostic: str | None, reason: str | None, owner: str | None,
                     occurred_at: dt.datetime | None) -> int | None:
    """``esp_event_insert``: the new row's id; ``None`` when the event was recorded before."""
    return cast("int | None", maybe_value(conn, "esp_event_insert", {
        "provider": provider, "event_id": event_id, "recipient": recipient, "kind": kind,
        "message_id": message_id, "email_id": email_id, "status": status,
        "diagnostic": diagnostic, "reason": reason, "owner": owner, "occurred_at": occurred_at,
    }, "id"))


def esp_event_set_effect(conn: Conn, *, id: int, effect: str) -> None:
    """``esp_event_set_effect``: what applying the event did."""
    execute(conn, "esp_event_set_effect", {"id": id, "effect": effect})


def esp_event_token_use(conn: Conn, *, provider: str, token: str) -> bool:
    """``esp_event_token_use``: whether the token was unused (and is now marked used)."""
    return maybe_value(conn, "esp_event_token_use", {"provider": provider, "token": token},
                       "token") is not None
