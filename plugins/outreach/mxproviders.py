"""The mailbox provider of a recipient domain, for the provider cap.

From the most preferred MX host (Google, Microsoft, Yahoo, Apple, else ``other``), cached in
``outreach.mx_providers`` by :func:`refresh` (a task of ``outreach_queue_due``) until the TTL
ends; the claim reads only that table, never DNS. Why:
docs/explanation/contact-policy.md#provider-aware-throttling."""

from __future__ import annotations

import datetime as dt
import logging

from outreach import db
from outreach.preflight import LookupFailed, _Dns, make_resolver
from outreach.store import mx_providers as store

log = logging.getLogger(__name__)

PROVIDER_SUFFIXES: dict[str, tuple[str, ...]] = {
    # aspmx.l.google.com, smtp.google.com, alt1.gmail-smtp-in.l.google.com
    "google": ("google.com", "googlemail.com"),
    # contoso-com.mail.protection.outlook.com, hotmail-com.olc.protection.outlook.com
    "microsoft": ("outlook.com", "hotmail.com", "office365.us", "outlook.cn"),
    # mta5.am0.yahoodns.net (Yahoo and AOL)
    "yahoo": ("yahoodns.net", "yahoo.com"),
    # mx01.mail.icloud.com (iCloud and custom domains on iCloud+)
    "apple": ("icloud.com", "me.com", "mac.com", "apple.com"),
}
"""Each provider's MX host domains (a host is the domain or under it)."""

MIN_TTL = 3600
"""Least seconds an answer is cached: the refresh runs with outreach_queue_due (every 15
minutes), so a shorter TTL (300 s is common) would leave the domain 'other' most of the time
between runs; a domain's mail provider changes rarely. Negative answers are cached this long."""

AHEAD = dt.timedelta(minutes=20)
"""Entries ending within this are refreshed ahead, so they do not lapse between two runs."""

BATCH = 500
"""Domains looked up per transaction."""


def provider_of_hosts(mx: list[tuple[int, str]]) -> str:
    """Return the provider of a domain whose MX records are ``(preference, exchange)``: the
    provider of the most preferred exchange (lowest preference, then by name; RFC 5321 §5.1),
    ``other`` without one or for a null MX (``.``, RFC 7505)."""
    hosts = sorted((pref, host.lower().rstrip(".")) for pref, host in mx)
    if not hosts or not hosts[0][1]:
        return "other"
    host = hosts[0][1]
    for provider, suffixes in PROVIDER_SUFFIXES.items():
        if any(host == s or host.endswith("." + s) for s in suffixes):
            return provider
    return "other"


def lookup(resolver: _Dns, domain: str) -> tuple[str, int]:
    """Return ``(provider, seconds to cache)`` for ``domain`` from its MX records: the TTL of the
    answer, at least :data:`MIN_TTL`; no such domain or no MX: ``("other", MIN_TTL)``.

    :raises outreach.preflight.LookupFailed: the lookup failed (timeout, SERVFAIL): nothing is
        known, nothing should be cached.
    """
    records, ttl = resolver.query_ttl(domain, "MX")
    provider = provider_of_hosts([(r.preference, str(r.exchange)) for r in records])
    return provider, max(ttl or 0, MIN_TTL)


def refresh(url: str, *, nameserver: str | None = None, now: dt.datetime | None = None,
            limit: int = 5_000, timeout: float = 3.0) -> dict[str, int]:
    """Look up and cache the provider of every queued campaign row's domain whose entry is missing or
    ends within :data:`AHEAD`. Safe concurrently and twice (upserts).

    A failed lookup keeps the old entry and is tried next run; a timeout skips the rest of the run.

    :param nameserver: only this resolver (``IP`` or ``IP:PORT``; default the system's).
    :param now: a fixed clock (UTC; default now).
    :param limit: most domains looked up in one run.
    :param timeout: seconds one lookup may take.
    :returns: ``{"looked_up": n, "failed": n}``.
    :raises psycopg.Error: the database failed (what was cached before stays)."""
    resolver = _Dns(make_resolver(nameserver, timeout=timeout))
    looked_up = failed = 0
    while looked_up + failed < limit:
        at = now or dt.datetime.now(dt.UTC)
        with db.transaction(url) as conn:
            stale = store.mx_provider_stale(conn, until=at + AHEAD,
                                            limit=min(BATCH, limit - looked_up - failed))
        stale = [d for d in stale if d]
        if not stale:
            break
        found: list[tuple[str, str, int]] = []
        for domain in stale:
            try:
                found.append((domain, *lookup(resolver, domain)))
            except LookupFailed as exc:
                failed += 1
                log.warning("mx providers: %s", exc)
        if found:
            with db.transaction(url) as conn:
                store.mx_provider_put(conn, domains=[f[0] for f in found],
                                      providers=[f[1] for f in found],
                                      ttls=[f[2] for f in found], now=at)
        looked_up += len(found)
        if len(found) < len(stale):
            break  # failures stay stale: the next run tries them (never loop on them now)
    if looked_up or failed:
        log.info("mx providers: looked_up=%s failed=%s", looked_up, failed)
    return {"looked_up": looked_up, "failed": failed}
