"""``outreach webhooks``: signed webhooks out (:mod:`outreach.webhooks`) — add and list endpoints,
run one delivery, replay dead or past deliveries."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.cli.common import database_url, positive_int


def cmd_add(args: argparse.Namespace) -> int:
    """Run ``outreach webhooks add``; return the exit code."""
    from outreach.webhooks import add_endpoint

    kinds = [k.strip() for k in args.events.split(",")]
    endpoint_id = add_endpoint(database_url(), name=args.name, endpoint_url=args.url,
                               event_kinds=kinds, secret_ref=args.secret,
                               enabled=not args.disabled)
    print(f"webhook endpoint {args.name} added (id {endpoint_id}); it gets the events from now "
          "on (older ones: outreach webhooks replay --endpoint NAME --since-event ID)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Run ``outreach webhooks list``; return the exit code."""
    from outreach import db
    from outreach.store.webhooks import webhook_endpoint_list

    with db.transaction(database_url()) as conn:
        endpoints = webhook_endpoint_list(conn)
    if not endpoints:
        print("no webhook endpoints (outreach webhooks add NAME --url … --events … --secret …)")
        return 0
    for e in endpoints:
        host = e.url.split("://", 1)[-1].split("/", 1)[0]  # the path may hold a token
        print(f"{e.name}\t{'enabled' if e.enabled else 'disabled'}\t{host}\t"
              f"{','.join(e.event_kinds)}\tsecret {e.secret_ref}\t"
              f"pending {e.pending}, delivered {e.delivered}, dead {e.dead}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run ``outreach webhooks run``: one enqueue and one delivery run (what the DAG does)."""
    from outreach.airflow.connections import named_secret
    from outreach.webhooks import deliver, enqueue

    url = database_url()
    queued = enqueue(url)
    result = deliver(url, secret=named_secret)
    print(f"{queued} queued; {result.line()}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Run ``outreach webhooks replay``; return the exit code."""
    from outreach.webhooks import replay

    added, reset = replay(database_url(), endpoint=args.endpoint, dead_only=args.dead,
                          since_event=args.since_event)
    print(f"{reset} delivery(ies) due again and {added} added; the next run posts them "
          "(same webhook-id: receivers de-duplicate)")
    return 0


def add_webhooks(sub: Any) -> None:
    """Add ``outreach webhooks`` and its sub-commands to the sub-commands ``sub``."""
    w = sub.add_parser("webhooks", help="signed webhooks out: endpoints, delivery, replay")
    wsub = w.add_subparsers(dest="webhooks_command", required=True)
    a = wsub.add_parser("add", help="add an endpoint subscribed to event kinds")
    a.add_argument("name", help="a unique name, [a-z0-9][a-z0-9_-]*")
    a.add_argument("--url", required=True, help="where events are posted (https:// in production)")
    a.add_argument("--events", required=True,
                   help="comma-separated event kinds (replied,bounced,…) or * for all")
    a.add_argument("--secret", required=True,
                   help="where the whsec_ secret is read: env:VARIABLE or conn:AIRFLOW_CONN_ID")
    a.add_argument("--disabled", action="store_true", help="add it disabled (nothing queued)")
    a.set_defaults(func=cmd_add)
    ls = wsub.add_parser("list", help="every endpoint with its deliveries by status")
    ls.set_defaults(func=cmd_list)
    r = wsub.add_parser("run", help="queue new events and post what is due, once")
    r.set_defaults(func=cmd_run)
    rp = wsub.add_parser("replay", help="post dead (or past) deliveries again")
    rp.add_argument("--endpoint", metavar="NAME", help="one endpoint (default: all)")
    rp.add_argument("--dead", action="store_true", help="the dead deliveries")
    rp.add_argument("--since-event", type=positive_int, metavar="ID",
                    help="every event from this id on, delivered or dead or never queued")
    rp.set_defaults(func=cmd_replay)
