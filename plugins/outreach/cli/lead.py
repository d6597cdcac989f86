"""``outreach lead stop``: end one lead's enrolment in a campaign; ``outreach lead show``: what
happened to one lead; ``outreach lead erase``: remove a person's personal data, keeping them
refused (:mod:`outreach.erasure`)."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import cli_who, database_url, operator_name


def cmd_lead(args: argparse.Namespace) -> int:
    """Run ``outreach lead …``; return the exit code."""
    from outreach.enrollments import stop_lead

    if args.lead_command == "stop":
        print(stop_lead(database_url(), args.address, args.campaign, args.reason, args.by,
                        who=cli_who()).line())
    elif args.lead_command == "show":
        return _show(args.address, as_json=args.json)
    elif args.lead_command == "erase":
        from outreach.erasure import ErasureError, erase

        try:
            result = erase(database_url(), args.address, actor=args.by or operator_name(),
                           reason=args.reason, who=cli_who())
        except ErasureError as exc:
            print(f"outreach: error: {exc}")
            return 1
        print(result.line())
    return 0


def _show(address: str, *, as_json: bool) -> int:
    """Print the lead's timeline (``lead_timeline``): one line per event, oldest first. The
    address is the operator's own input, so it is shown; the diagnostic texts are masked."""
    import datetime as dt
    import json

    from outreach import db
    from outreach.addresses import normal_form
    from outreach.logutil import mask_addresses
    from outreach.store.leads import lead_by_address, lead_timeline

    norm = normal_form(address)
    with db.connect(database_url(), autocommit=True) as conn:
        if lead_by_address(conn, address=norm) is None:
            print(f"outreach: error: no lead {address!r} (addresses are compared in their normal form)")
            return 1
        entries = lead_timeline(conn, address=norm)
    if as_json:
        print(json.dumps([{"at": e.at.isoformat() if e.at else None, "what": e.what,
                           "detail": mask_addresses(e.detail)} for e in entries], indent=2))
        return 0
    print(f"lead {norm}")
    for e in entries:
        at = f"{e.at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC" if e.at else "(no time)"
        print(f"  {at}  {e.what:<24} {mask_addresses(e.detail)}")
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
    s = ldsub.add_parser("show", help="what happened to one lead, oldest first: enrolments, "
                         "emails sent or failed (with the reason), inbound mail (class, reason, "
                         "effect), stops, suppressions")
    s.add_argument("address")
    s.add_argument("--json", action="store_true", help="print JSON")
    s = ldsub.add_parser("erase", help="erase a person (GDPR Art. 17): their personal data is "
                         "removed from every table, and their address kept only as a keyed hash "
                         "that refuses it at import, queueing and the handoff (needs "
                         "OUTREACH_ERASURE_KEY)")
    s.add_argument("address")
    s.add_argument("--reason", default="erasure request",
                   help="why, e.g. a ticket number (recorded; must not name the person)")
    s.add_argument("--by", help="who (recorded; default: the OS user)")
    ldp.set_defaults(func=cmd_lead)
