"""Typed calls of ``sql/queries/org_domains.sql``, one function per query, named like it.

``outreach.org_domains`` maps email domains to organisations for the per-company cap
(outreach.orgdomains fills it; the claim reads it).
"""

from __future__ import annotations

from typing import cast

from outreach.store._run import Conn, execute, values


def org_domain_missing(conn: Conn, *, limit: int) -> list[str]:
    """``org_domain_missing``: at most ``limit`` lead email domains not yet in
    ``outreach.org_domains``."""
    return cast("list[str]", values(conn, "org_domain_missing", {"limit": limit}, "domain"))


def org_domain_add(conn: Conn, *, domains: list[str], orgs: list[str]) -> None:
    """``org_domain_add``: map ``domains[i]`` to ``orgs[i]`` (free mail when the organisation is
    a free-mail domain); domains already mapped are left alone."""
    execute(conn, "org_domain_add", {"domains": domains, "orgs": orgs})
