"""``outreach mailbox``: pause, resume, history, sync, health checks, login check."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import cli_who, database_url, user_path


def _print_verdicts(verdicts: list, rule: str) -> None:
    for v in verdicts:
        print(f"mailbox {v.mailbox_id} ({v.mailbox}) {'paused' if v.paused else 'already paused'}:"
              f" {v.reason}")
    if not verdicts:
        print(f"no active mailbox above the {rule} threshold")


def cmd_mailbox(args: argparse.Namespace) -> int:
    """Run ``outreach mailbox …``; return the exit code."""
    from outreach import mailboxes

    url = database_url()
    if args.mailbox_command == "pause":
        print(mailboxes.pause_mailbox(url, args.mailbox, args.reason, args.by,
                                      who=cli_who()).line())
    elif args.mailbox_command == "resume":
        print(mailboxes.resume_mailbox(url, args.mailbox, args.by, args.reason,
                                       who=cli_who()).line())
    elif args.mailbox_command == "history":
        events = mailboxes.mailbox_events(url, args.mailbox)
        for e in events:
            print(f"{e['created_at']:%Y-%m-%d %H:%M %Z}  mailbox {e['mailbox_id']} ({e['address']})"
                  f"  {e['event']} by {e['actor']}: {e['reason']}")
        if not events:
            print("no pause or resume events" + (f" for mailbox {args.mailbox}" if args.mailbox else ""))
    elif args.mailbox_command == "check":
        from outreach.cli.logincheck import check_mailbox

        address, checks = check_mailbox(url, args.mailbox,
                                        user_path(args.file, "include/mailboxes.yaml"))
        print(f"mailbox {address}:")
        for c in checks:
            print("  " + c.line())
        return 0 if all(c.ok for c in checks) else 1
    elif args.mailbox_command == "sync":
        from outreach.campaign import sync_mailboxes

        ids = sync_mailboxes(url, args.file)
        print(f"synced {len(ids)} mailbox(es) from {args.file}")
    elif args.mailbox_command == "check-bounces":
        from outreach.health import HealthSettings, pause_on_bounce_rate

        h = HealthSettings.from_env()
        _print_verdicts(pause_on_bounce_rate(url, threshold=h.bounce_rate_threshold,
                                             min_sends=h.bounce_min_sends,
                                             window_days=h.bounce_window_days), "bounce-rate")
    elif args.mailbox_command == "check-complaints":
        from outreach.health import HealthSettings, pause_on_complaint_rate

        h = HealthSettings.from_env()
        _print_verdicts(pause_on_complaint_rate(url, threshold=h.complaint_rate_threshold,
                                                min_sends=h.bounce_min_sends,
                                                window_days=h.bounce_window_days), "complaint-rate")
    elif args.mailbox_command == "check-spam-rate":
        from outreach.health import HealthSettings, pause_on_spam_rate

        h = HealthSettings.from_env()
        _print_verdicts(pause_on_spam_rate(url, threshold=h.spam_rate_threshold), "spam-rate")
    return 0


def add_mailbox(sub: Any) -> None:
    """Add ``outreach mailbox`` to the sub-commands ``sub``."""
    mbp = sub.add_parser("mailbox", help="pause or resume a mailbox, its history, health checks")
    mbsub = mbp.add_subparsers(dest="mailbox_command", required=True)
    for name, help_, reason_help in (
            ("pause", "pause a mailbox: it sends nothing until resumed", "why (recorded)"),
            ("resume", "resume a paused mailbox (cap and pacing still apply)", "why (recorded)")):
        s = mbsub.add_parser(name, help=help_)
        s.add_argument("mailbox", metavar="ADDRESS_OR_ID")
        s.add_argument("--by", required=True, help="who (recorded)")
        s.add_argument("--reason", required=True, help=reason_help)
    s = mbsub.add_parser("history", help="pause/resume history, newest first")
    s.add_argument("mailbox", metavar="ADDRESS_OR_ID", nargs="?")
    s = mbsub.add_parser("check", help="try the mailbox's SMTP and IMAP logins (password or "
                         "OAuth 2.0) and say what works")
    s.add_argument("mailbox", metavar="ADDRESS_OR_ID")
    s.add_argument("--file", help="mailbox YAML whose 'auth' the logins must match (default: "
                   "the project's include/mailboxes.yaml)")
    s = mbsub.add_parser("sync", help="write every mailbox of the mailbox file to the database")
    s.add_argument("--file", default="include/mailboxes.yaml")
    mbsub.add_parser("check-bounces", help="pause mailboxes above the hard-bounce rate threshold")
    mbsub.add_parser("check-complaints",
                     help="pause mailboxes above the complaint-rate threshold (ARF reports read)")
    mbsub.add_parser("check-spam-rate",
                     help="pause mailboxes above the spam-rate threshold (stored Postmaster figures)")
    mbp.set_defaults(func=cmd_mailbox)
