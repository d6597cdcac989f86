"""The organisation of a lead, for the per-company cap (docs/explanation/contact-policy.md).

``outreach.org_domains`` maps an email domain to its registrable domain (the Public Suffix List,
RFC 7489 §3.2, offline); the claim only reads it (unknown: its own organisation), so :func:`fill`
runs after every import and before every queueing. Free mail: rows of 0132 and their subdomains."""

from __future__ import annotations

import logging

from outreach import db
from outreach.preflight import organizational_domain
from outreach.store import org_domains as store

log = logging.getLogger(__name__)

BATCH = 5_000
"""Domains mapped per statement."""


def fill(url: str) -> int:
    """Map every lead email domain that ``outreach.org_domains`` does not know yet.

    Safe to run concurrently and twice: inserts skip domains already mapped (ON CONFLICT DO
    NOTHING), each batch its own transaction.

    :returns: the number of domains looked at (mapped now or by a concurrent run).
    :raises psycopg.Error: the database failed (what was mapped before stays).
    """
    seen = 0
    while True:
        with db.transaction(url) as conn:
            missing = store.org_domain_missing(conn, limit=BATCH)
            if not missing:
                break
            store.org_domain_add(conn, domains=missing,
                                  orgs=[organizational_domain(d) for d in missing])
        seen += len(missing)
        if len(missing) < BATCH:
            break
    if seen:
        log.info("org domains: mapped=%s", seen)
    return seen
