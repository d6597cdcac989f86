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
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    """Run ``outreach send``; return the exit code."""
    from outreach.airflow.connections import dkim_private_key, smtp_connector
    from outreach.airflow.connections import settings as load_settings
    from outreach.send import MailboxUnreachable, send_run

    settings = load_settings()
    if args.limit:  # validated like OUTREACH_BATCH_SIZE
        settings = settings.replace(batch_size=args.limit)
    url = database_url()
    while True:
        try:
            run = send_run(url, smtp_connector, settings, mailbox_id=args.mailbox,
                           dkim_keys=dkim_private_key)
        except MailboxUnreachable as exc:  # its rows were released: --until-empty would only claim them again
            for part in exc.summaries:
                print(part.line(), flush=True)
            raise
        if not run.plan:
            print("nothing due, or nothing more allowed in this run (daily cap, pacing, paused)")
        for part in (p for b in run.batches for p in b.batches):
            print(part.line(), flush=True)
        if not args.until_empty or run.claimed == 0:
            return 0


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


def add_queue_due(sub: Any) -> None:
    """Add ``outreach queue-due`` to the sub-commands ``sub``."""
    s = sub.add_parser("queue-due", help="queue every due sequence step")
    s.add_argument("--campaign", help="only this campaign key")
    s.set_defaults(func=cmd_queue_due)


def add_send(sub: Any) -> None:
    """Add ``outreach send`` to the sub-commands ``sub``."""
    s = sub.add_parser("send", help="one send run: plan, then claim and send each planned batch")
    s.add_argument("--mailbox", type=int, help="mailbox id")
    s.add_argument("--limit", type=int, help="rows to claim at most (default OUTREACH_BATCH_SIZE)")
    s.add_argument("--until-empty", action="store_true", help="keep claiming until nothing is due")
    s.set_defaults(func=cmd_send)


def add_reap(sub: Any) -> None:
    """Add ``outreach reap`` to the sub-commands ``sub``."""
    sub.add_parser("reap", help="take back rows left 'sending' too long: unconfirmed if handed "
                   "over, else back in the queue").set_defaults(func=cmd_reap)
