"""``outreach transactional``: enqueue, send, worker, show."""

from __future__ import annotations

import argparse
import json
from typing import Any

from outreach.cli.common import database_url


def cmd_transactional(args: argparse.Namespace) -> int:
    """Run ``outreach transactional …``; return the exit code."""
    from outreach import db, transactional
    from outreach.airflow.connections import dkim_private_key, smtp_connector
    from outreach.airflow.connections import settings as load_settings

    url = database_url()
    if args.tx_command == "enqueue":
        try:
            context = json.loads(args.context)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--context: not JSON ({exc})") from None
        with db.connect(url) as conn, conn.transaction():
            r = transactional.enqueue(conn, args.key, args.to, args.template, context,
                                      mailbox=args.mailbox)
        print(f"email {r.email_id}: {'enqueued' if r.created else 'already enqueued'} "
              f"(status {r.status})")
    elif args.tx_command == "send":
        from outreach.send import MailboxUnreachable

        try:
            summary = transactional.send_due(url, smtp_connector, load_settings(unsubscribe=False),
                                             dkim_keys=dkim_private_key)
        except MailboxUnreachable as exc:
            for part in exc.summaries:
                print(part.line(), flush=True)
            raise
        for part in summary.batches:
            print(part.line(), flush=True)
        print(summary.line())
    elif args.tx_command == "worker":
        print(f"sending transactional mail as it is enqueued (poll every {args.poll} s); Ctrl-C stops",
              flush=True)
        try:
            transactional.watch(url, smtp_connector, load_settings(unsubscribe=False),
                                poll_seconds=args.poll,
                                dkim_keys=dkim_private_key)
        except KeyboardInterrupt:
            pass
    elif args.tx_command == "show":
        from outreach.logutil import mask
        from outreach.store.transactional import transactional_by_key

        with db.connect(url, autocommit=True) as conn:
            row = transactional_by_key(conn, delivery_key=args.key)
        if row is None:
            print(f"no email has delivery key {args.key!r}")
            return 1
        print(f"email {row.id} to {mask(row.recipient)} ({row.template}): {row.status}"
              + (f"/{row.failure_kind}" if row.failure_kind else "")
              + f", {row.attempts} attempt(s)"
              + (f", Message-ID <{row.message_id}> accepted {row.accepted_at:%Y-%m-%d %H:%M:%S} UTC"
                 if row.message_id else "")
              + (f" - {row.last_error}" if row.last_error else ""))
    return 0


def add_transactional(sub: Any) -> None:
    """Add ``outreach transactional`` to the sub-commands ``sub``."""
    txp = sub.add_parser("transactional", help="transactional mail with a delivery key")
    txsub = txp.add_subparsers(dest="tx_command", required=True)
    s = txsub.add_parser("enqueue", help="enqueue one email (the same key again changes nothing)")
    s.add_argument("--key", required=True, help="the delivery key (made when the request arrived)")
    s.add_argument("--to", required=True)
    s.add_argument("--template", required=True, help="include/templates/<name>.{subject,txt,html}.j2")
    s.add_argument("--context", default="{}", help="template variables, a JSON object")
    s.add_argument("--mailbox", help="sending mailbox (default: the one marked transactional)")
    txsub.add_parser("send", help="one send cycle of due transactional emails")
    s = txsub.add_parser("worker", help="send transactional emails as they are enqueued (LISTEN)")
    s.add_argument("--poll", type=float, default=30.0, help="seconds between polls (default 30)")
    s = txsub.add_parser("show", help="the email of a delivery key and its send-log entry")
    s.add_argument("key")
    txp.set_defaults(func=cmd_transactional)
