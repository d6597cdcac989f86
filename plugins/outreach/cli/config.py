"""``outreach config check``: every setting and connection of the deployment, checked at once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def cmd_config_check(args: argparse.Namespace) -> int:
    """Run ``outreach config check``: exit 0 with one summary line, or 2 with one line per
    problem on stderr (see :func:`outreach.airflow.configcheck.check`)."""
    from outreach.airflow.configcheck import SCOPES, check
    from outreach.cli.common import database_url, user_path
    from outreach.dev.deploy import pool_slots
    from outreach.dev.embedded import opted_in

    skip = {s.strip() for s in (args.skip or "").split(",") if s.strip()}
    if unknown := skip - set(SCOPES):
        raise ValueError(f"--skip: unknown {sorted(unknown)}; known: {', '.join(SCOPES)}")
    mailboxes = user_path(args.mailboxes, "include/mailboxes.yaml")
    report = check([s for s in SCOPES if s not in skip],
                   mailbox_file=Path(mailboxes) if mailboxes else None,
                   database_url=database_url, extra=(opted_in, pool_slots))
    if report.ok:
        print(report.summary())
        return 0
    for problem in report.problems:
        print(f"outreach: config: {problem}", file=sys.stderr)
    print(report.summary(), file=sys.stderr)
    return 2


def add_config(sub: Any) -> None:
    """Add ``outreach config check`` to the sub-commands ``sub``."""
    cfg = sub.add_parser("config", help="the deployment's configuration")
    cfgsub = cfg.add_subparsers(dest="config_command", required=True)
    s = cfgsub.add_parser("check", help="check every OUTREACH_* setting, the mailbox and campaign "
                          "files, the database and the Airflow connections at once (exit 2 "
                          "with one line per problem)")
    s.add_argument("--mailboxes", help="mailbox YAML (default: the project's include/mailboxes.yaml)")
    s.add_argument("--skip", metavar="SCOPES", help="comma-separated scopes not to check: "
                   "settings, files, database, connections (e.g. connections, before they are "
                   "added in the Airflow UI)")
    s.set_defaults(func=cmd_config_check)
