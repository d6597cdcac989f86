"""``outreach lead stop``: end one lead's enrolment in a campaign."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url


def cmd_lead(args: argparse.Namespace) -> int:
    """Run ``outreach lead …``; return the exit code."""
    from outreach.enrollments import stop_lead

    if args.lead_command == "stop":
        print(stop_lead(database_url(), args.address, args.campaign, args.reason, args.by).line())
    return 0


def add_lead(sub: Any) -> None:
    """Add ``outreach lead`` to the sub-commands ``sub``."""
    ldp = sub.add_parser("lead", help="operator controls of one lead")
    ldsub = ldp.add_subparsers(dest="lead_command", required=True)
    s = ldsub.add_parser("stop", help="stop a lead's enrolment in a campaign: its queued steps are "
                         "cancelled and it gets nothing more in that campaign (final)")
    s.add_argument("address")
    s.add_argument("--campaign", required=True, help="the campaign key")
    s.add_argument("--by", required=True, help="who (recorded)")
    s.add_argument("--reason", required=True, help="why (recorded)")
    ldp.set_defaults(func=cmd_lead)
