"""``outreach roles sync``: the outreach roles of Airflow's FAB auth manager and the first admin
user (:mod:`outreach.airflow.roles`), run by every deployment's init."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_roles_sync(args: argparse.Namespace) -> int:
    """Run ``outreach roles sync`` (the admin's first password from ``OUTREACH_ADMIN_PASSWORD``);
    return the exit code."""
    import os
    import sys

    from outreach.airflow.roles import ADMIN_PASSWORD_VAR, sync

    try:
        done = sync(os.environ.get(ADMIN_PASSWORD_VAR) or None)
    except RuntimeError as exc:
        print(f"outreach: error: {exc}", file=sys.stderr)
        return 1
    for line in done:
        print(line)
    return 0


def add_roles(sub: Any) -> None:
    """Add ``outreach roles`` to the sub-commands ``sub``."""
    rp = sub.add_parser("roles", help="Airflow's users and roles (FAB auth manager)")
    rsub = rp.add_subparsers(dest="roles_command", required=True)
    rsub.add_parser("sync", help="create or reset the roles Analyst and Operator; create the user "
                    "admin (OUTREACH_ADMIN_PASSWORD) if missing").set_defaults(func=cmd_roles_sync)
