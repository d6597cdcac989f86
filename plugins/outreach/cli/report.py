"""``outreach report``: per campaign, step and mailbox."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url


def cmd_report(args: argparse.Namespace) -> int:
    """Run ``outreach report``; return the exit code."""
    from outreach.report import collect, render_json, render_text

    report = collect(database_url())
    print(render_json(report) if args.json else render_text(report))
    return 0


def add_report(sub: Any) -> None:
    """Add ``outreach report`` to the sub-commands ``sub``."""
    s = sub.add_parser("report", help="per campaign, step and mailbox")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_report)
