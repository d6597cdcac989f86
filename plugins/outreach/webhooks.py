"""Signed webhooks out (issue 26, item 4): events of ``outreach.events`` posted to each endpoint
subscribed to their kind, in the Standard Webhooks convention (standardwebhooks.com).

:func:`enqueue` makes one delivery row per endpoint and event (UNIQUE); :func:`deliver` claims
them (SKIP LOCKED, the attempt counted before any post, no transaction open during a post), posts
signed bodies that name rows by id, never an address (0115), and retries with backoff until dead;
:func:`replay` makes them due again. :func:`destination` refuses non-public addresses (DNS
rebinding, OWASP SSRF prevention). Logs name the endpoint, never its URL nor the secret. What
holds and where: docs/howto/webhooks.md#what-holds-and-where."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from outreach import db
from outreach.logutil import log, mask_addresses
from outreach.settings import WebhookSettings
from outreach.store import webhooks as store
from outreach.store.webhooks import ClaimedDelivery

USER_AGENT = "outreach-webhooks/1"


def webhook_id(event_id: int) -> str:
    """Return the ``webhook-id`` of an event: ``evt_<event id>``, the same for every endpoint,
    attempt and replay (Standard Webhooks: the id receivers de-duplicate by)."""
    return f"evt_{event_id}"


def body(delivery: ClaimedDelivery) -> bytes:
    """Return the JSON body posted for a delivery's event: ``type``, ``timestamp`` (when the event
    occurred, ISO 8601 UTC) and ``data`` (the event's ids and payload), compact with sorted keys so
    every attempt posts the same bytes."""
    data: dict[str, Any] = {**delivery.payload, "event_id": delivery.event_id,
                            "campaign_id": delivery.campaign_id, "lead_id": delivery.lead_id,
                            "email_id": delivery.email_id}
    occurred = delivery.occurred_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": delivery.kind, "timestamp": occurred, "data": data},
                      separators=(",", ":"), sort_keys=True, default=str).encode()


def signed_headers(secret: str, msg_id: str, payload: bytes,
                   sent_at: dt.datetime | None = None) -> dict[str, str]:
    """Return the Standard Webhooks headers of one post.

    :param secret: the endpoint's ``whsec_…`` secret (base64 after the prefix).
    :param msg_id: the ``webhook-id`` (:func:`webhook_id`).
    :param payload: the exact body bytes.
    :param sent_at: the signing moment (default now, UTC): receivers refuse a timestamp more than
        5 minutes away from their clock, so it is the moment of sending, not of the event.
    :raises ValueError: the secret is not base64 (``standardwebhooks`` decodes it).
    """
    from standardwebhooks import Webhook
    from standardwebhooks.webhooks import EmptyWebhookSecretError

    moment = sent_at or dt.datetime.now(dt.UTC)
    try:
        signer = Webhook(secret)
    except (ValueError, EmptyWebhookSecretError) as exc:  # binascii.Error; never the value
        raise ValueError(f"the webhook secret is not a whsec_ base64 secret "
                         f"({type(exc).__name__})") from None
    return {"content-type": "application/json", "user-agent": USER_AGENT,
            "webhook-id": msg_id, "webhook-timestamp": str(int(moment.timestamp())),
            "webhook-signature": signer.sign(msg_id, moment, payload.decode())}


@dataclass(frozen=True)
class DeliveryResult:
    """What one :func:`deliver` run did: posts answered 2xx, failed attempts to retry, deliveries
    that became dead, and claims found taken over (not posted)."""

    delivered: int = 0
    retried: int = 0
    dead: int = 0
    skipped: int = 0

    def line(self) -> str:
        """The run's one summary line for the task log."""
        return (f"webhooks: {self.delivered} delivered, {self.retried} failed and to be retried, "
                f"{self.dead} dead, {self.skipped} taken over by another run")


def enqueue(url: str, *, now: dt.datetime | None = None) -> int:
    """Turn new events into deliveries for every enabled endpoint subscribed to their kind.

    :param now: when they are due (UTC, timezone-aware; default the database's now), for tests.
    :return: the number of deliveries queued.
    :raises outreach.db.OutreachDBError: the database cannot be reached.
    """
    with db.transaction(url) as conn:
        counts = store.webhook_enqueue(conn, now=now)
    log.info("webhooks: %d delivery(ies) queued for %d endpoint(s)", counts.queued,
             counts.endpoints)
    return counts.queued


def deliver(url: str, *, secret: Callable[[str], str], settings: WebhookSettings | None = None,
            now: dt.datetime | None = None) -> DeliveryResult:
    """Post the due deliveries until none is due or the run's time is up; return the counts.

    :param settings: timeout, attempts, backoff, batch and run length (default from the environment).
    :param now: the database clock for due times and backoff (UTC; default the database's now); the
        signature's timestamp is always the real moment of sending.
    :param secret: returns the secret a ``secret_ref`` names, or raises :class:`LookupError`.
    :raises outreach.db.OutreachDBError: the database cannot be reached.
    :raises outreach.settings.SettingsError: a setting is out of range."""
    import httpx

    s = settings or WebhookSettings()
    counts = {"delivered": 0, "retried": 0, "dead": 0, "skipped": 0}
    deadline = time.monotonic() + s.webhook_run_seconds
    token = uuid.uuid4()
    known: dict[str, str] = {}

    def read_secret(ref: str) -> str:  # once per run and reference (a connection is a lookup)
        if ref not in known:
            known[ref] = secret(ref)
        return known[ref]

    with db.connect(url, autocommit=True) as conn, \
            httpx.Client(timeout=s.webhook_timeout, follow_redirects=False) as client:
        while time.monotonic() < deadline:
            claimed = store.webhook_claim(conn, token=token, batch=s.webhook_batch_size,
                                          lease_seconds=s.lease_seconds, now=now)
            if not claimed:
                break
            for d in claimed:
                if not store.webhook_touch(conn, id=d.id, token=token,
                                           lease_seconds=s.lease_seconds, now=now):
                    counts["skipped"] += 1
                    continue
                status, error = _post(client, d, read_secret, s.webhook_allow_private)
                if error is None and status is not None:
                    store.webhook_deliver_ok(conn, id=d.id, token=token, http_status=status,
                                             now=now)
                    counts["delivered"] += 1
                    continue
                failed = store.webhook_fail(
                    conn, id=d.id, token=token, http_status=status, error=error,
                    max_attempts=s.webhook_max_attempts, base_seconds=s.webhook_retry_base_seconds,
                    cap_seconds=s.webhook_retry_cap_seconds, now=now)
                if failed is None:
                    counts["skipped"] += 1
                elif failed.status == "dead":
                    counts["dead"] += 1
                    log.warning("webhooks: %s event %d dead after %d attempts (%s)", d.endpoint,
                                d.event_id, failed.attempts, error)
                else:
                    counts["retried"] += 1
                    log.info("webhooks: %s event %d attempt %d failed (%s); next at %s",
                             d.endpoint, d.event_id, failed.attempts, error,
                             failed.next_attempt_at.isoformat())
            token = uuid.uuid4()  # a fresh claim per batch: a late write of this one finds nothing
    result = DeliveryResult(**counts)
    log.info(result.line())
    return result


class UnsafeDestination(ValueError):
    """An endpoint URL that may not be posted to (:func:`destination`); the message names the
    host and the setting, never the URL's path or query (they may hold a token)."""


ALLOW_PRIVATE_HINT = ("set OUTREACH_WEBHOOK_ALLOW_PRIVATE=true only for a receiver on this machine "
                      "or a private network you trust")


def destination(endpoint_url: str, *, allow_private: bool) -> tuple[str, str]:
    """Check where a post to ``endpoint_url`` would go; return ``(host, address)`` to connect to.

    Every address the host resolves to (A and AAAA) must be public (``is_global``) unless
    ``allow_private``; the post connects to the checked address, so DNS rebinding cannot redirect it.

    :raises UnsafeDestination: not an http(s) URL with a host, the host does not resolve, or it
        resolves to a non-public address and ``allow_private`` is off."""
    import httpx

    try:
        url = httpx.URL(endpoint_url)
    except httpx.InvalidURL as exc:
        raise UnsafeDestination(f"webhook URL cannot be parsed: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise UnsafeDestination("webhook URL must be http:// or https:// with a host")
    try:
        infos = socket.getaddrinfo(url.host, url.port or (443 if url.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeDestination(f"webhook host {url.host} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not allow_private:
        private = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_global]
        if private:
            raise UnsafeDestination(f"webhook host {url.host} resolves to a non-public address "
                                    f"({', '.join(private[:3])}); {ALLOW_PRIVATE_HINT}")
    return url.host, addresses[0]


def _post(client: Any, d: ClaimedDelivery, secret: Callable[[str], str],
          allow_private: bool) -> tuple[int | None, str | None]:
    """Post one delivery to the address :func:`destination` checked; return (HTTP status or
    ``None``, ``None`` on a 2xx else the error in a line that holds neither the URL nor an
    address)."""
    import httpx

    payload = body(d)
    try:
        headers = signed_headers(secret(d.secret_ref), webhook_id(d.event_id), payload)
        host, address = destination(d.url, allow_private=allow_private)
    except (LookupError, ValueError) as exc:
        return None, str(exc)[:300]
    try:
        url = httpx.URL(d.url)
        headers["Host"] = url.netloc.decode("ascii")
        # Streamed, the body never read: only the status decides, and a receiver that drips its
        # body a byte at a time (each read under the timeout) cannot hold the post past its
        # lease, where another run would post it again (review 2026-12-02).
        with client.stream("POST", url.copy_with(host=address), content=payload, headers=headers,
                           extensions={"sni_hostname": host}) as response:
            status = response.status_code
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL is not an HTTPError
        return None, mask_addresses(f"{type(exc).__name__}: {exc}".replace(d.url, "<url>"))[:300]
    if 200 <= status < 300:
        return status, None
    return status, f"HTTP {status}"


def replay(url: str, *, endpoint: str | None = None, dead_only: bool = False,
           since_event: int | None = None, now: dt.datetime | None = None) -> tuple[int, int]:
    """Make deliveries due again, with their attempts from 0: the dead ones (``dead_only``), or
    every delivered or dead one of an event ``since_event`` or later, adding the events of that
    range an endpoint has no delivery for (those before it was added).

    :param endpoint: an endpoint's name (default every endpoint).
    :return: (deliveries added, deliveries reset).
    :raises ValueError: neither ``dead_only`` nor ``since_event`` given, or an unknown endpoint.
    :raises outreach.db.OutreachDBError: the database cannot be reached.
    """
    if not dead_only and since_event is None:
        raise ValueError("say what to replay: --dead, --since-event ID, or both")
    with db.transaction(url) as conn:
        if endpoint is not None and endpoint not in {e.name for e in
                                                     store.webhook_endpoint_list(conn)}:
            raise ValueError(f"no webhook endpoint named {endpoint!r} (outreach webhooks list)")
        counts = store.webhook_replay(conn, endpoint=endpoint, dead_only=dead_only,
                                      since_event=since_event, now=now)
    log.info("webhooks: replay added %d and reset %d delivery(ies)", counts.added, counts.reset)
    return counts.added, counts.reset


def add_endpoint(url: str, *, name: str, endpoint_url: str, event_kinds: list[str],
                 secret_ref: str, enabled: bool = True, allow_private: bool | None = None) -> int:
    """Add an endpoint; return its id. It gets the events of transactions that end from now on.

    :param name: unique, ``[a-z0-9][a-z0-9_-]*`` (at most 63 characters).
    :param endpoint_url: an http(s) URL, checked by :func:`destination` (and again at each post).
    :param event_kinds: kinds of ``outreach.events`` (``replied``, ``bounced`` …) or ``*``.
    :param secret_ref: ``env:NAME`` or ``conn:ID``, where the ``whsec_`` secret is read.
    :param allow_private: default ``OUTREACH_WEBHOOK_ALLOW_PRIVATE``.
    :raises UnsafeDestination: the URL may not be posted to (nothing stored).
    :raises ValueError: a value the table refuses (the constraint named), or the name exists."""
    destination(endpoint_url, allow_private=WebhookSettings().webhook_allow_private
                if allow_private is None else allow_private)
    try:
        with db.transaction(url) as conn:
            return store.webhook_endpoint_add(conn, name=name, url=endpoint_url,
                                              event_kinds=event_kinds, secret_ref=secret_ref,
                                              enabled=enabled)
    except db.OutreachDBError as exc:
        if exc.constraint is None:
            raise
        raise ValueError(f"webhook endpoint refused ({exc.constraint})") from None
