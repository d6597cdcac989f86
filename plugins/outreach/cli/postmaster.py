"""``outreach postmaster``: fetch Google Postmaster Tools figures."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url


def cmd_postmaster(args: argparse.Namespace) -> int:
    """Run ``outreach postmaster``; return the exit code."""
    from outreach.airflow.connections import postmaster_credentials
    from outreach.health import HealthSettings
    from outreach.postmaster import PostmasterClient, fetch_and_store

    h = HealthSettings.from_env()
    client = PostmasterClient(postmaster_credentials(), base_url=h.postmaster_base_url)
    summary = fetch_and_store(database_url(), client, days=args.days or h.postmaster_days)
    for domain, d in summary.domains.items():
        print(f"{domain} {summary.start}..{summary.end}: {d['days_known']} day(s) with data, "
              f"{d['days_unknown']} unknown; compliance needs work: {d['needs_work'] or 'nothing'}")
    if not summary.domains:
        print("no mailboxes, no domains")
    return 0


def add_postmaster(sub: Any) -> None:
    """Add ``outreach postmaster`` to the sub-commands ``sub``."""
    s = sub.add_parser("postmaster", help="fetch Postmaster Tools figures (connection outreach_postmaster)")
    s.add_argument("--days", type=int, help="days to fetch, today included (default 14)")
    s.set_defaults(func=cmd_postmaster)
