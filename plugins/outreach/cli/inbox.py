"""``outreach inbox``: read each mailbox's inbox."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from outreach.cli.common import database_url


def cmd_inbox(args: argparse.Namespace) -> int:
    """Run ``outreach inbox``; return the exit code."""
    from outreach import db
    from outreach.airflow.connections import imap_account, optional_unsubscribe_secret
    from outreach.inbox import SUMMARY_LOG, InboxError, plan_targets, read_target
    from outreach.mailboxes import find_mailbox

    url = database_url()
    targets = plan_targets(url)
    if args.mailbox:
        with db.connect(url, autocommit=True) as conn:
            wanted = find_mailbox(conn, args.mailbox).id
        targets = [t for t in targets if wanted in t["mailbox_ids"]]
    if not targets:
        print("no mailbox to read: give mailboxes an imap_conn_id in include/mailboxes.yaml, "
              "then `outreach mailbox sync`")
        return 0
    failed = []
    secret = optional_unsubscribe_secret()
    # Each read's line is printed here, and a failed read's error again at the end: the log's
    # copy of the same line (for the DAG's task log) only with -v; other warnings still show.
    logger = logging.getLogger("outreach")
    drop = SUMMARY_LOG.filter
    if not getattr(args, "verbose", False):
        logger.addFilter(drop)
    try:
        for t in targets:
            try:
                print(read_target(url, t, imap_account, unsubscribe_secret=secret).line(), flush=True)
            except InboxError as exc:
                print(exc.summary.line(), flush=True)
                failed.append(str(exc))
    finally:
        logger.removeFilter(drop)
    # The same rules as the outreach_inbox DAG runs after its reads (outreach.health): a read
    # that found bounces or complaints pauses a mailbox above the rate before the next send.
    from outreach.health import HealthSettings, pause_on_bounce_rate, pause_on_complaint_rate

    health = HealthSettings.from_env()
    verdicts = pause_on_bounce_rate(
        url, threshold=health.bounce_rate_threshold, min_sends=health.bounce_min_sends,
        window_days=health.bounce_window_days) + pause_on_complaint_rate(
        url, threshold=health.complaint_rate_threshold, min_sends=health.bounce_min_sends,
        window_days=health.bounce_window_days)
    for v in verdicts:
        print(f"mailbox {v.mailbox} {'paused' if v.paused else 'already paused'} by the "
              f"{v.rule} rule: {v.reason}", flush=True)
    for line in failed:
        print(f"outreach: error: {line}", file=sys.stderr)
    return 1 if failed else 0


def add_inbox(sub: Any) -> None:
    """Add ``outreach inbox`` to the sub-commands ``sub``."""
    s = sub.add_parser("inbox", help="read each mailbox's inbox: replies, bounces, complaints, "
                       "unsubscribes")
    s.add_argument("--mailbox", help="only this mailbox (address or id)")
    s.set_defaults(func=cmd_inbox)
