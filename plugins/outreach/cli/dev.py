"""The dev commands: ``outreach demo`` and ``outreach airflow`` (local Airflow). The only
commands that start :mod:`outreach.dev` tooling (besides ``db stop`` and the embedded opt-in)."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_demo(args: argparse.Namespace) -> int:
    """Run ``outreach demo``; return the exit code."""
    from outreach.dev.demo import run_demo

    return run_demo()


def cmd_airflow(args: argparse.Namespace) -> int:
    """Run ``outreach airflow``; return the exit code."""
    from outreach.dev.deploy import run_foreground

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    return run_foreground(args.executor, args.workers)


def add_airflow(sub: Any) -> None:
    """Add ``outreach airflow`` to the sub-commands ``sub``."""
    s = sub.add_parser("airflow", help="run Airflow on this machine (api-server, scheduler, "
                       "dag-processor, triggerer[, Celery workers]) until Ctrl-C")
    s.add_argument("--executor", choices=["local", "celery"], default="local",
                   help="local: LocalExecutor (the embedded PostgreSQL unless configured); celery: "
                        "CeleryExecutor on OUTREACH_DATABASE_URL and REDIS_URL")
    s.add_argument("--workers", type=int, default=2, help="Celery workers (default 2)")
    s.set_defaults(func=cmd_airflow)


def add_demo(sub: Any) -> None:
    """Add ``outreach demo`` to the sub-commands ``sub``."""
    sub.add_parser("demo", help="run the main job on the sample data with real Airflow").set_defaults(func=cmd_demo)
