"""Typed calls of ``sql/queries/mx_providers.sql``, one function per query, named like it.

``outreach.mx_providers`` caches each email domain's mailbox provider from its MX records for the
provider cap (outreach.mxproviders fills it; the claim reads it).
"""

from __future__ import annotations

import datetime as dt
from typing import cast

from outreach.store._run import Conn, execute, values


def mx_provider_stale(conn: Conn, *, until: dt.datetime, limit: int) -> list[str]:
    """``mx_provider_stale``: at most ``limit`` domains of queued campaign rows not cached or
    whose entry ends before ``until``, the longest expired first."""
    return cast("list[str]", values(conn, "mx_provider_stale", {"until": until, "limit": limit},
                                    "domain"))


def mx_provider_put(conn: Conn, *, domains: list[str], providers: list[str], ttls: list[int],
                    now: dt.datetime) -> None:
    """``mx_provider_put``: cache ``providers[i]`` for ``domains[i]`` until ``now`` + ``ttls[i]``
    seconds, replacing older entries."""
    execute(conn, "mx_provider_put", {"domains": domains, "providers": providers, "ttls": ttls,
                                      "now": now})
