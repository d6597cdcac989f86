"""``outreach campaign``: pause, resume, history."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url


def cmd_campaign(args: argparse.Namespace) -> int:
    """Run ``outreach campaign …``; return the exit code."""
    from outreach import campaign_pause

    url = database_url()
    if args.campaign_command == "pause":
        print(campaign_pause.pause_campaign(url, args.campaign, args.reason, args.by).line())
    elif args.campaign_command == "resume":
        print(campaign_pause.resume_campaign(url, args.campaign, args.by, args.reason).line())
    elif args.campaign_command == "history":
        events = campaign_pause.campaign_events(url, args.campaign)
        for e in events:
            print(f"{e['created_at']:%Y-%m-%d %H:%M %Z}  campaign {e['key']}  {e['event']} by "
                  f"{e['actor']}: {e['reason']}")
        if not events:
            print("no pause or resume events" + (f" for campaign {args.campaign}" if args.campaign else ""))
    return 0


def add_campaign(sub: Any) -> None:
    """Add ``outreach campaign`` to the sub-commands ``sub``."""
    cpp = sub.add_parser("campaign", help="pause or resume a campaign, its history")
    cpsub = cpp.add_subparsers(dest="campaign_command", required=True)
    for name, help_ in (("pause", "pause a campaign: none of its steps is queued or claimed "
                                  "until resumed"),
                        ("resume", "resume a paused campaign (cap and pacing still apply)")):
        s = cpsub.add_parser(name, help=help_)
        s.add_argument("campaign", metavar="KEY")
        s.add_argument("--by", required=True, help="who (recorded)")
        s.add_argument("--reason", required=True, help="why (recorded)")
    s = cpsub.add_parser("history", help="pause/resume history, newest first")
    s.add_argument("campaign", metavar="KEY", nargs="?")
    cpp.set_defaults(func=cmd_campaign)
