"""``outreach queue-due``, ``send`` (one :func:`outreach.send.send_run`) and ``reap``."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url


def cmd_queue_due(args: argparse.Namespace) -> int:
    """Run ``outreach queue-due``; return the exit code."""
    from outreach.queue import held_line, queue_due

    result = queue_due(database_url(), campaign_key=args.campaign)
    for h in result["held"]:
        print(f"  {held_line(h)}")
    print(f"queued {result['queued']} email(s)")
    for key in result["finished"]:
        print(f"campaign {key} finished: every enrolment is done (it takes no new leads)")
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    """Run ``outreach send``; return the exit code."""
    from outreach.airflow.connections import dkim_private_key, smtp_connector
    from outreach.airflow.connections import settings as load_settings
    from outreach.airflow.defaults import send_sessions_per_task
    from outreach.send import MailboxUnreachable, send_run

    settings = load_settings()
    sessions = send_sessions_per_task()  # as a send task of the DAG: cut to the pool when set
    url = database_url()
    claimed = 0  # --limit counts the rows of the whole command, every run of --until-empty too
    while True:
        left = None if args.limit is None else args.limit - claimed
        if left is not None and left <= 0:
            print(f"--limit {args.limit} reached: claimed {claimed} row(s) in all")
            return 0
        try:
            run = send_run(url, smtp_connector, settings, mailbox_id=args.mailbox,
                           dkim_keys=dkim_private_key, limit=left, sessions=sessions)
        except MailboxUnreachable as exc:  # its rows were released: --until-empty would only claim them again
            for part in exc.summaries:
                print(part.line(), flush=True)
            raise
        if not run.plan:
            print_held(url, settings.send_interval, args.mailbox)
        for part in (p for b in run.batches for p in b.batches):
            print(part.line(), flush=True)
        claimed += run.claimed
        if not args.until_empty or run.claimed == 0:
            return 0


def print_held(url: str, interval: Any, mailbox_id: int | None) -> None:
    """Say why a send run planned nothing: nothing due, or per mailbox with due rows what held
    them this run (:func:`outreach.queue.run_allowances`: paused, daily cap, send window,
    pacing)."""
    from outreach.queue import run_allowances

    held = run_allowances(url, interval=interval, mailbox_id=mailbox_id)
    if not held:
        print("nothing due: no queued email of an active campaign is due yet")
        return
    print("nothing more allowed in this run:")
    for a in held:
        print(f"  {a.line()}")


def cmd_reap(args: argparse.Namespace) -> int:
    """Run ``outreach reap``; return the exit code."""
    from outreach.airflow.connections import settings as load_settings
    from outreach.queue import reap

    # Only the reaper's threshold is used: no unsubscribe URL or secret is needed to take rows back.
    reap_settings = load_settings(unsubscribe=False)
    reaped = reap(database_url(), reap_settings.reaper_threshold,
                  release=reap_settings.release_threshold)
    print(f"marked {len(reaped.unconfirmed)} email(s) unconfirmed (handed over, outcome unknown)"
          + (f": {reaped.unconfirmed}" if reaped.unconfirmed else ""))
    print(f"put {len(reaped.requeued)} email(s) back in the queue (never handed over)"
          + (f": {reaped.requeued}" if reaped.requeued else ""))
    return 0


def _positive(text: str) -> int:
    """An argument that must be a whole number of at least 1, digits only (``int()`` would take
    ``1_0`` and `` 5``)."""
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_queue_due(sub: Any) -> None:
    """Add ``outreach queue-due`` to the sub-commands ``sub``."""
    s = sub.add_parser("queue-due", help="queue every due sequence step")
    s.add_argument("--campaign", help="only this campaign key")
    s.set_defaults(func=cmd_queue_due)


def add_send(sub: Any) -> None:
    """Add ``outreach send`` to the sub-commands ``sub``."""
    s = sub.add_parser(
        "send", help="one send run: plan, then claim and send each planned batch",
        description="One send run, as the send DAG does it: reap, plan, then claim and send each "
        "planned batch. What bounds it, each counted in rows (one row is one message, handed "
        "over at most once): the mailbox's daily cap and warm-up (per local calendar day), "
        "pacing (OUTREACH_SEND_INTERVAL_MINUTES: this run's share of the day), "
        "OUTREACH_BATCH_SIZE (rows one planned batch claims), OUTREACH_SEND_PARALLELISM "
        "(planned batches per run), and --limit. OUTREACH_SEND_SESSIONS_PER_TASK (default 1) "
        "planned batches go at once, one SMTP session each, as in one send task of the DAG (cut "
        "to divide OUTREACH_SMTP_POOL_SLOTS when that is set; one after the other with --limit). "
        "Between two handoffs of one mailbox: OUTREACH_SEND_GAP_SECONDS (default 60, with jitter).")
    s.add_argument("--mailbox", type=int, help="only this mailbox id")
    s.add_argument("--limit", type=_positive, metavar="N",
                   help="rows (messages) the whole command claims at most: every planned batch "
                   "and mailbox together, and every run of --until-empty (default: no limit "
                   "beyond the caps above)")
    s.add_argument("--until-empty", action="store_true",
                   help="run again until a run claims nothing (or --limit is reached)")
    s.set_defaults(func=cmd_send)


def add_reap(sub: Any) -> None:
    """Add ``outreach reap`` to the sub-commands ``sub``."""
    sub.add_parser("reap", help="take back rows left 'sending' too long: unconfirmed if handed "
                   "over, else back in the queue").set_defaults(func=cmd_reap)
