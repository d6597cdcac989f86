"""``outreach campaign``: submit, approve, reject, pause, resume, history, preview, test-send."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import cli_who, database_url, operator_name, positive_int


def cmd_campaign(args: argparse.Namespace) -> int:
    """Run ``outreach campaign …``; return the exit code."""
    from outreach import campaign_pause

    url = database_url()
    if args.campaign_command == "pause":
        print(campaign_pause.pause_campaign(url, args.campaign, args.reason, args.by,
                                            who=cli_who()).line())
    elif args.campaign_command == "resume":
        print(campaign_pause.resume_campaign(url, args.campaign, args.by, args.reason,
                                             who=cli_who()).line())
    elif args.campaign_command in ("submit", "approve", "reject"):
        reason = args.reason or {"submit": "submitted for approval",
                                 "approve": "approved"}.get(args.campaign_command, "")
        print(campaign_pause.change_status(url, args.campaign, args.campaign_command,
                                           args.by or operator_name(), reason,
                                           who=cli_who()).line())
    elif args.campaign_command == "preview":
        return _preview(url, args)
    elif args.campaign_command == "test-send":
        return _test_send(url, args)
    elif args.campaign_command == "history":
        events = campaign_pause.campaign_events(url, args.campaign)
        for e in events:
            print(f"{e['created_at']:%Y-%m-%d %H:%M %Z}  campaign {e['key']}  {e['event']} by "
                  f"{e['actor']}: {e['reason']}")
        if not events:
            print("no status events" + (f" for campaign {args.campaign}" if args.campaign else ""))
    return 0


def _preview(url: str, args: argparse.Namespace) -> int:
    """Print each previewed message as a reader sees it (``--raw``: as it would be handed over),
    or why the step skips the lead."""
    import sys

    from outreach.airflow.connections import settings as load_settings
    from outreach.preview import item_readable, item_text, preview

    items = preview(url, args.campaign, load_settings(), address=args.lead, sample=args.sample,
                    step=args.step)
    for item in items:
        sys.stdout.buffer.write(item_text(item, args.step) if args.raw
                                else item_readable(item, args.step).encode())
    sys.stdout.buffer.flush()
    return 0


def _test_send(url: str, args: argparse.Namespace) -> int:
    """Send a step to the seed addresses; print one line per seed; exit 1 if one was not sent."""
    from outreach.airflow.connections import dkim_private_key, smtp_connector
    from outreach.airflow.connections import settings as load_settings
    from outreach.testsend import send_to_seeds

    results = send_to_seeds(url, args.campaign, args.to, load_settings(), smtp_connector,
                        actor=args.by or operator_name(), lead=args.lead, step=args.step,
                        dkim_keys=dkim_private_key)
    for r in results:
        print(f"test send step {args.step} to {r.recipient}: "
              + (f"sent, Message-ID <{r.message_id}> ({r.reply})" if r.sent
                 else f"NOT sent: {r.reply}"))
    return 0 if all(r.sent for r in results) else 1


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
    for name, help_ in (("submit", "submit a draft campaign for approval"),
                        ("approve", "approve a submitted campaign: active from the next queue-due"),
                        ("reject", "reject a submitted campaign: back to draft, with --reason")):
        s = cpsub.add_parser(name, help=help_)
        s.add_argument("campaign", metavar="KEY")
        s.add_argument("--by", help="who (recorded; default: the OS user)")
        s.add_argument("--reason", required=name == "reject", help="why (recorded)")
    s = cpsub.add_parser("preview", help="print a step's messages as a reader sees them (--raw: "
                                         "exactly as they would be handed over), and the leads "
                                         "it would skip and why")
    s.add_argument("campaign", metavar="KEY")
    s.add_argument("--raw", action="store_true",
                   help="the wire form: every header as written, the MIME parts encoded")
    who = s.add_mutually_exclusive_group()
    who.add_argument("--lead", metavar="ADDRESS", help="this enrolled lead")
    who.add_argument("--sample", type=positive_int, default=3, metavar="N",
                     help="the first N enrolled leads (default 3)")
    s.add_argument("--step", type=positive_int, default=1, metavar="S", help="step (default 1)")
    s = cpsub.add_parser("test-send", help="send a step, rendered for a lead, to seed addresses "
                                           "through the real mailbox (counts toward its cap)")
    s.add_argument("campaign", metavar="KEY")
    s.add_argument("--to", required=True, nargs="+", metavar="ADDRESS", help="seed address(es)")
    s.add_argument("--lead", metavar="ADDRESS",
                   help="render for this enrolled lead (default: the first enrolled)")
    s.add_argument("--step", type=positive_int, default=1, metavar="S", help="step (default 1)")
    s.add_argument("--by", help="who (recorded; default: the OS user)")
    s = cpsub.add_parser("history", help="status history (submit, approve, pause…), newest first")
    s.add_argument("campaign", metavar="KEY", nargs="?")
    cpp.set_defaults(func=cmd_campaign)
