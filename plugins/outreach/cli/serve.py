"""``outreach serve-unsubscribe``: the one-click unsubscribe service under uvicorn."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url


def cmd_serve_unsubscribe(args: argparse.Namespace) -> int:
    """Run ``outreach serve-unsubscribe``; return the exit code."""
    import uvicorn

    from outreach.airflow.connections import unsubscribe_secret
    from outreach.web.unsubscribe_app import create_app

    unsubscribe_secret()  # refuse to start without a secret rather than answer 503 later
    app = create_app(database_url, unsubscribe_secret)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning",
                proxy_headers=True, server_header=False)
    return 0


def add_serve_unsubscribe(sub: Any) -> None:
    """Add ``outreach serve-unsubscribe`` to the sub-commands ``sub``."""
    s = sub.add_parser("serve-unsubscribe", help="run the one-click unsubscribe service (uvicorn)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8025)
    s.set_defaults(func=cmd_serve_unsubscribe)
