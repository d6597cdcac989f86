"""Typed calls of ``sql/queries/webhooks.sql``, one function per query, named like it.

Webhooks out (:mod:`outreach.webhooks`, migration 0130): endpoints subscribe to event kinds, one
delivery row per (endpoint, event); every change of a claimed delivery is guarded by its claim
token.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, cast

from outreach.store._run import Conn, many, maybe_value, one, one_value


@dataclass(frozen=True)
class Endpoint:
    """An endpoint as ``webhook_endpoint_list`` reports it, with its deliveries by status."""

    id: int
    name: str
    url: str
    event_kinds: list[str]
    secret_ref: str
    enabled: bool
    pending: int
    delivered: int
    dead: int


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery claimed by one run (``webhook_claim``): its attempt number (counted at the
    claim), the endpoint's name, URL and secret reference, and the event."""

    id: int
    attempts: int
    endpoint: str
    url: str
    secret_ref: str
    event_id: int
    kind: str
    occurred_at: dt.datetime
    campaign_id: int | None
    lead_id: int | None
    email_id: int | None
    payload: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    """What ``webhook_fail`` left: ``status`` pending (retried at ``next_attempt_at``) or dead."""

    id: int
    status: str
    attempts: int
    next_attempt_at: dt.datetime


@dataclass(frozen=True)
class EnqueueCounts:
    """A row of ``webhook_enqueue``: deliveries queued, endpoints whose boundary moved."""

    queued: int
    endpoints: int


@dataclass(frozen=True, slots=True)
class ReplayCounts:
    """A row of ``webhook_replay``: deliveries added, deliveries reset to pending."""

    added: int
    reset: int


def webhook_endpoint_add(conn: Conn, *, name: str, url: str, event_kinds: list[str],
                         secret_ref: str, enabled: bool = True) -> int:
    """``webhook_endpoint_add``: add an endpoint; return its id.

    :raises outreach.db.OutreachDBError: the name exists (constraint
        ``outreach_webhook_endpoints_name_key``) or a value breaks a check constraint.
    """
    return cast("int", one_value(conn, "webhook_endpoint_add", {
        "name": name, "url": url, "event_kinds": event_kinds, "secret_ref": secret_ref,
        "enabled": enabled}, "id"))


def webhook_endpoint_list(conn: Conn) -> list[Endpoint]:
    """``webhook_endpoint_list``: every endpoint by name, with its deliveries counted."""
    return many(conn, "webhook_endpoint_list", {}, Endpoint)


def webhook_enqueue(conn: Conn, *, now: dt.datetime | None = None) -> EnqueueCounts:
    """``webhook_enqueue``: turn the events past each enabled endpoint's boundary into deliveries
    due at ``now`` (UTC; default the database's now); return (deliveries queued, endpoints whose
    boundary moved)."""
    return one(conn, "webhook_enqueue", {"now": now}, EnqueueCounts)


def webhook_claim(conn: Conn, *, token: uuid.UUID, batch: int, lease_seconds: float,
                  now: dt.datetime | None = None) -> list[ClaimedDelivery]:
    """``webhook_claim``: claim at most ``batch`` due deliveries with ``token``, counting the
    attempt and moving them ``lease_seconds`` ahead."""
    return many(conn, "webhook_claim", {"token": token, "batch": batch,
                                        "lease_seconds": lease_seconds, "now": now},
                ClaimedDelivery)


def webhook_touch(conn: Conn, *, id: int, token: uuid.UUID, lease_seconds: float,
                  now: dt.datetime | None = None) -> bool:
    """``webhook_touch``: return whether the claim still holds (its lease restarted)."""
    return maybe_value(conn, "webhook_touch", {"id": id, "token": token,
                                               "lease_seconds": lease_seconds, "now": now},
                       "id") is not None


def webhook_deliver_ok(conn: Conn, *, id: int, token: uuid.UUID, http_status: int,
                       now: dt.datetime | None = None) -> bool:
    """``webhook_deliver_ok``: mark the claimed delivery delivered; return whether the claim
    still held."""
    return maybe_value(conn, "webhook_deliver_ok", {"id": id, "token": token,
                                                    "http_status": http_status, "now": now},
                       "id") is not None


def webhook_fail(conn: Conn, *, id: int, token: uuid.UUID, http_status: int | None, error: str,
                 max_attempts: int, base_seconds: float, cap_seconds: float,
                 now: dt.datetime | None = None) -> Failed | None:
    """``webhook_fail``: record a failed attempt (pending again after the backoff, or dead);
    ``None`` when the claim no longer held."""
    rows = many(conn, "webhook_fail", {"id": id, "token": token, "http_status": http_status,
                                       "error": error, "max_attempts": max_attempts,
                                       "base_seconds": base_seconds, "cap_seconds": cap_seconds,
                                       "now": now}, Failed)
    return rows[0] if rows else None


def webhook_replay(conn: Conn, *, endpoint: str | None, dead_only: bool, since_event: int | None,
                   now: dt.datetime | None = None) -> ReplayCounts:
    """``webhook_replay``: make deliveries due again; return (deliveries added, reset)."""
    return one(conn, "webhook_replay", {"endpoint": endpoint, "dead_only": dead_only,
                                        "since_event": since_event, "now": now}, ReplayCounts)
