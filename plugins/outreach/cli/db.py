"""``outreach db``: the schema (``upgrade``) and the embedded server (``stop``, dev)."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url
from outreach.dev import embedded


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Run ``outreach db upgrade``; return the exit code."""
    from outreach.migrate import current_version, upgrade

    url = database_url()
    applied = upgrade(url)
    if applied:
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}")
    else:
        print(f"database is up to date (version {current_version(url)})")
    return 0


def cmd_db_stop(args: argparse.Namespace) -> int:
    """Run ``outreach db stop``; return the exit code."""
    from outreach.settings import DatabaseSettings

    print(embedded.stop())
    if DatabaseSettings().database_url:
        print("OUTREACH_DATABASE_URL is set: that database is not the product's to stop")
    return 0


def add_db(sub: Any) -> None:
    """Add ``outreach db`` to the sub-commands ``sub``."""
    dbp = sub.add_parser("db", help="the database: schema, the embedded server")
    dbsub = dbp.add_subparsers(dest="db_command", required=True)
    dbsub.add_parser("upgrade", help="apply pending migrations").set_defaults(func=cmd_db_upgrade)
    dbsub.add_parser("stop", help="stop the embedded PostgreSQL of .outreach/pgdata, if it runs "
                     "(whoever started it)").set_defaults(func=cmd_db_stop)
