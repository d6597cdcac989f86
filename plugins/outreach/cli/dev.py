"""The dev commands: ``outreach demo``, ``outreach airflow`` (local Airflow) and ``outreach
doctor`` (the deployment's capacity). The only commands that start :mod:`outreach.dev` tooling
(besides ``db stop`` and the embedded opt-in)."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_demo(args: argparse.Namespace) -> int:
    """Run ``outreach demo``; return the exit code."""
    from outreach.dev.demo import run_demo

    return run_demo()


def cmd_airflow(args: argparse.Namespace) -> int:
    """Run ``outreach airflow``; return the exit code."""
    from outreach.dev.deploy import run_foreground, run_worker_foreground

    args.executor = args.executor or ("celery" if args.role == "worker" else "local")
    workers = args.workers if args.workers is not None else (1 if args.role == "worker" else 2)
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if args.role == "worker":
        if args.executor != "celery":
            raise ValueError("outreach airflow worker runs Celery workers: leave out --executor "
                             "or give --executor celery")
        return run_worker_foreground(workers, args.name)
    return run_foreground(args.executor, workers)


def add_airflow(sub: Any) -> None:
    """Add ``outreach airflow`` to the sub-commands ``sub``."""
    s = sub.add_parser("airflow", help="run Airflow on this machine (api-server, scheduler, "
                       "dag-processor, triggerer[, Celery workers]) until Ctrl-C")
    s.add_argument("role", nargs="?", choices=["all", "worker"], default="all",
                   help="all (default): the whole deployment; worker: Celery workers only, for a "
                        "deployment running here or on another machine "
                        "(docs/howto/celery-scale-out.md)")
    s.add_argument("--executor", choices=["local", "celery"], default=None,
                   help="local: LocalExecutor (the embedded PostgreSQL unless configured); celery: "
                        "CeleryExecutor on OUTREACH_DATABASE_URL and REDIS_URL")
    s.add_argument("--workers", type=int, default=None,
                   help="Celery workers (default 2; 1 with 'worker')")
    s.add_argument("--name", default=None, help="with 'worker': worker i is NAME-worker-i "
                   "(default: host name and process id)")
    s.set_defaults(func=cmd_airflow)


def add_demo(sub: Any) -> None:
    """Add ``outreach demo`` to the sub-commands ``sub``."""
    sub.add_parser("demo", help="run the main job on the sample data with real Airflow").set_defaults(func=cmd_demo)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Run ``outreach doctor``: print the sizing rule's numbers (mailboxes from the usual database) and
    one line per configured value that caps the workers; return 1 when one does, else 0."""
    import os

    from outreach.cli.common import database_url
    from outreach.sizing import caps, from_environment

    try:
        url: str | None = database_url()
    except Exception:  # noqa: BLE001 - no database: the rule's defaults, said so below
        url = None
    celery = args.executor == "celery"
    sizing = from_environment(args.workers if celery else 1, url)
    rule = sizing.environment("CeleryExecutor" if celery else "LocalExecutor")
    given: dict[str, int] = {}
    bad: list[str] = []
    for k, v in rule.items():
        raw = os.environ.get(k, "").strip() or v
        try:
            given[k] = int(raw)
        except ValueError:
            given[k] = 0
        if given[k] < 1:
            bad.append(f"{k}={raw!r} is not a whole number ≥ 1: set it (the rule gives {v}; "
                       "the lines below assume that)")
            given[k] = int(v)
    print(sizing.line() + ("" if url else " (no outreach database: mailboxes from "
                           "OUTREACH_MAILBOXES or the default)"))
    for k, v in rule.items():
        print(f"  {k}={given.get(k, v)}" + ("" if str(given.get(k, v)) == v else f" (rule: {v})"))
    found = bad + caps(sizing, pool_slots=given["OUTREACH_SMTP_POOL_SLOTS"],
                       send_parallelism=given["OUTREACH_SEND_PARALLELISM"],
                       parallelism=given["AIRFLOW__CORE__PARALLELISM"],
                       worker_concurrency=given.get("AIRFLOW__CELERY__WORKER_CONCURRENCY") if celery else None,
                       per_task=given["OUTREACH_SEND_SESSIONS_PER_TASK"])
    for line in found:
        print(f"cap: {line}")
    if not found:
        print("nothing caps the workers below the rule")
    return 1 if found else 0


def add_doctor(sub: Any) -> None:
    """Add ``outreach doctor`` to the sub-commands ``sub``."""
    s = sub.add_parser("doctor", help="the deployment's capacity: the sizing rule "
                       "(docs/reference/sizing.md) and what caps the workers")
    s.add_argument("--executor", choices=["local", "celery"], default="celery")
    s.add_argument("--workers", type=int, default=2, help="Celery workers (default 2)")
    s.set_defaults(func=cmd_doctor)
