"""``outreach suppress`` and ``unsuppress``: one address or domain, who and why kept."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import cli_who, database_url, operator_name


def cmd_suppress(args: argparse.Namespace) -> int:
    """Run ``outreach suppress``; return the exit code."""
    from outreach import db
    from outreach.suppression import suppress

    with db.transaction(database_url()) as conn:
        added, cancelled = suppress(conn, args.value, args.reason, args.source,
                                    actor=args.by or operator_name(), who=cli_who())
    print(f"{'suppressed' if added else 'already suppressed'}; cancelled {cancelled} queued email(s)")
    return 0


def cmd_unsuppress(args: argparse.Namespace) -> int:
    """Run ``outreach unsuppress``; return the exit code."""
    from outreach import db
    from outreach.suppression import unsuppress

    with db.transaction(database_url()) as conn:
        result = unsuppress(conn, args.value, actor=args.by or operator_name(), note=args.reason,
                            who=cli_who())
    if not result.removed:
        print(f"{result.kind} {result.value} was not suppressed; nothing changed")
        return 1
    print(f"unsuppressed {result.kind} {result.value} (was: {result.reason}); recorded in "
          "outreach.suppression_events. Emails it cancelled stay cancelled.")
    if result.still_suppressed:
        print(f"  note: {result.value} is still suppressed by another entry (a whole-domain "
              "suppression?)")
    return 0


def add_suppress(sub: Any) -> None:
    """Add ``outreach suppress`` to the sub-commands ``sub``."""
    s = sub.add_parser("suppress", help="suppress an address or a whole domain (@acme.com)")
    s.add_argument("value")
    s.add_argument("--reason", default="manual")
    s.add_argument("--source", default="cli")
    s.add_argument("--by", help="who is doing it (default: the login name)")
    s.set_defaults(func=cmd_suppress)


def add_unsuppress(sub: Any) -> None:
    """Add ``outreach unsuppress`` to the sub-commands ``sub``."""
    s = sub.add_parser("unsuppress", help="remove a suppression, recording who and why")
    s.add_argument("value", help="an address, or a whole domain (@acme.com)")
    s.add_argument("--reason", required=True, help="why (for example a ticket reference)")
    s.add_argument("--by", help="who is doing it (default: the login name)")
    s.set_defaults(func=cmd_unsuppress)
