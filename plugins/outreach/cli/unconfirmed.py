"""``outreach unconfirmed``, ``resolve`` and ``requeue``: emails a person must decide."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import cli_who, database_url


def cmd_unconfirmed(args: argparse.Namespace) -> int:
    """Run ``outreach unconfirmed``; return the exit code."""
    from outreach.airflow.connections import imap_account
    from outreach.resolve import describe_unconfirmed, list_unconfirmed, row_message_id, sent_evidence

    rows = list_unconfirmed(database_url(), campaign_key=args.campaign, mailbox=args.mailbox)
    sent = sent_evidence(rows, imap_account)
    for r in rows:
        print(describe_unconfirmed(r))
        print(f"    Message-ID <{row_message_id(r)}>: {sent[r['id']].text()}")
    late = [r["id"] for r in rows if r["late_accepted_at"]]
    found = sum(1 for e in sent.values() if e.state == "found")
    print(f"{len(rows)} unconfirmed email(s), {found} found in a Sent folder: check Sent Items, then "
          "`outreach resolve` (--auto-found resolves the found ones as was-sent)")
    if late:
        print(f"{len(late)} of them the server accepted late (EVIDENCE above): "
              f"`outreach resolve --ids {','.join(map(str, late))} --decision was-sent --by NAME`")
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    """Run ``outreach resolve``; return the exit code."""
    from outreach.resolve import resolve, resolve_found

    if args.auto_found:
        from outreach.airflow.connections import imap_account

        if args.decision or args.ids:
            raise ValueError("--auto-found decides by itself: give no --decision or --ids")
        result = resolve_found(database_url(), args.by, imap_account, campaign_key=args.campaign,
                               mailbox=args.mailbox, who=cli_who())
        print(result.line())
        return 0
    if not args.decision:
        raise ValueError("give --decision was-sent|not-sent, or --auto-found")
    ids = [int(x) for x in args.ids.split(",")] if args.ids else None
    result = resolve(database_url(), args.decision.replace("-", "_"), args.by, ids=ids,
                     campaign_key=args.campaign, mailbox=args.mailbox, note=args.note,
                     who=cli_who())
    print(result.line())
    return 0


def cmd_requeue(args: argparse.Namespace) -> int:
    """Run ``outreach requeue``; return the exit code."""
    from outreach.resolve import requeue_failed

    ids = [int(x) for x in args.ids.split(",")] if args.ids else None
    result = requeue_failed(database_url(), args.failed_kind.replace("-", "_"), args.by, args.reason,
                            ids=ids, campaign_key=args.campaign, mailbox=args.mailbox,
                            who=cli_who())
    print(result.line())
    return 0


def add_unconfirmed(sub: Any) -> None:
    """Add ``outreach unconfirmed`` to the sub-commands ``sub``."""
    s = sub.add_parser("unconfirmed", help="list unconfirmed emails (a person must decide)")
    s.add_argument("--campaign")
    s.add_argument("--mailbox", help="address or id")
    s.set_defaults(func=cmd_unconfirmed)


def add_resolve(sub: Any) -> None:
    """Add ``outreach resolve`` to the sub-commands ``sub``."""
    s = sub.add_parser("resolve", help="resolve unconfirmed emails after checking Sent Items")
    s.add_argument("--ids", help="comma-separated email ids")
    s.add_argument("--campaign")
    s.add_argument("--mailbox", help="address or id")
    s.add_argument("--decision", choices=["was-sent", "not-sent"])
    s.add_argument("--auto-found", action="store_true",
                   help="resolve as was-sent every row found in its mailbox's Sent folder "
                        "(the evidence is recorded); the others stay")
    s.add_argument("--by", required=True, help="who decides (recorded)")
    s.add_argument("--note", default="")
    s.set_defaults(func=cmd_resolve)


def add_requeue(sub: Any) -> None:
    """Add ``outreach requeue`` to the sub-commands ``sub``."""
    s = sub.add_parser("requeue", help="put emails that failed without being accepted "
                       "(retries exhausted) back in the queue, recording who and why")
    s.add_argument("--failed-kind", required=True, choices=["retries_exhausted", "sender_refused"],
                   help="only not-accepted failures (sender_refused: a 5xx whose reason was "
                   "ours, once fixed); unconfirmed ones: `outreach resolve`")
    s.add_argument("--ids", help="comma-separated email ids")
    s.add_argument("--campaign")
    s.add_argument("--mailbox", help="address or id")
    s.add_argument("--by", required=True, help="who decides (recorded)")
    s.add_argument("--reason", required=True, help="why (recorded)")
    s.set_defaults(func=cmd_requeue)
