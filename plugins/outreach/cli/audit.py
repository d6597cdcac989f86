"""``outreach audit``: the audit trail of operator decisions (:mod:`outreach.audit`)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from typing import Any

from outreach.cli.common import database_url, positive_int

_AGO = re.compile(r"^(\d+)([mhd])$")


def since(text: str) -> dt.datetime:
    """An argparse ``type``: a time to list from, ``7d``/``12h``/``30m`` ago, or an ISO date or
    date-time (``2026-03-08``, ``2026-03-08T10:00``; UTC when it has no offset).

    :raises argparse.ArgumentTypeError: neither.
    """
    text = text.strip()
    m = _AGO.match(text)
    if m:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[m.group(2)]
        return dt.datetime.now(dt.UTC) - dt.timedelta(**{unit: int(m.group(1))})
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since takes 7d, 12h, 30m or an ISO date/time, got {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def cmd_audit(args: argparse.Namespace) -> int:
    """Run ``outreach audit``; return the exit code."""
    import json

    from outreach.audit import audit_rows, describe

    rows = audit_rows(database_url(), campaign_key=args.campaign, since=args.since,
                      limit=args.limit)
    if args.json:
        print(json.dumps([{**r, "at": r["at"].astimezone(dt.UTC).isoformat()} for r in rows],
                         indent=2, default=str))
        return 0
    for r in rows:
        print(describe(r))
    if not rows:
        print("no audit rows" + (f" for campaign {args.campaign}" if args.campaign else ""))
    return 0


def add_audit(sub: Any) -> None:
    """Add ``outreach audit`` to the sub-commands ``sub``."""
    s = sub.add_parser("audit", help="who decided what, when and why (newest first)")
    s.add_argument("--campaign", help="only the decisions about this campaign (its key)")
    s.add_argument("--since", type=since, help="7d, 12h, 30m ago, or an ISO date/time (UTC)")
    s.add_argument("--limit", type=positive_int, default=200, help="at most this many rows")
    s.add_argument("--json", action="store_true", help="one JSON list")
    s.set_defaults(func=cmd_audit)
