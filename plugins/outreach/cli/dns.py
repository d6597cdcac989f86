"""``outreach preflight`` and ``dkim-record``: a sending domain's DNS."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _dkim_key(conn_id: str | None, key_file: str | None) -> bytes | None:
    if key_file:
        from pathlib import Path

        return Path(key_file).read_bytes()
    if conn_id:
        from outreach.airflow.connections import dkim_private_key

        return dkim_private_key(conn_id)
    return None


def cmd_preflight(args: argparse.Namespace) -> int:
    """Run ``outreach preflight``; return the exit code."""
    from outreach.campaign import load_mailboxes
    from outreach.preflight import make_resolver, run_preflight
    from outreach.signing import public_key_b64

    selector, conn_id = args.selector, args.key_conn_id
    if not args.key_file and not conn_id and args.mailboxes:
        # The mailbox file says which selector and key a domain signs with.
        for m in load_mailboxes(args.mailboxes):
            if (m.address.rpartition("@")[2].lower() == args.domain.lower().rstrip(".")
                    and m.dkim_selector and (selector is None or selector == m.dkim_selector)):
                selector, conn_id = m.dkim_selector, m.dkim_key_conn_id
                break
    key = _dkim_key(conn_id, args.key_file)
    report = run_preflight(args.domain, selector=selector, sending_ip=args.sending_ip,
                           dkim_public_key=public_key_b64(key) if key else None,
                           resolver=make_resolver(args.nameserver, timeout=args.timeout))
    print(report.text())
    return 2 if report.failed else 0


def cmd_dkim_record(args: argparse.Namespace) -> int:
    """Run ``outreach dkim-record``; return the exit code."""
    from outreach.signing import public_key_record

    key = _dkim_key(args.key_conn_id, args.key_file)
    if key is None:
        print("outreach: error: give --key-conn-id or --key-file", file=sys.stderr)
        return 1
    name = (f"{args.selector}._domainkey.{args.domain}" if args.selector and args.domain
            else "<selector>._domainkey.<domain>")
    print(f"{name} TXT \"{public_key_record(key)}\"")
    return 0


def add_preflight(sub: Any) -> None:
    """Add ``outreach preflight`` to the sub-commands ``sub``."""
    s = sub.add_parser("preflight", help="check a sending domain's DNS (SPF, DKIM, DMARC, MX, PTR)")
    s.add_argument("domain")
    s.add_argument("--selector", help="DKIM selector (default: the mailbox file's, if any)")
    s.add_argument("--sending-ip", help="the IP your SMTP server sends from (SPF, PTR)")
    s.add_argument("--nameserver", help="ask only this DNS server, IP[:PORT]")
    s.add_argument("--mailboxes", default="include/mailboxes.yaml",
                   help="mailbox file naming the domain's DKIM selector and key connection")
    s.add_argument("--key-conn-id", help="Airflow connection holding the DKIM private key")
    s.add_argument("--key-file", help="PEM file of the DKIM private key (instead of a connection)")
    s.add_argument("--timeout", type=float, default=5.0, help="seconds per DNS lookup (5)")
    s.set_defaults(func=cmd_preflight)


def add_dkim_record(sub: Any) -> None:
    """Add ``outreach dkim-record`` to the sub-commands ``sub``."""
    s = sub.add_parser("dkim-record", help="print the DKIM TXT record for a private key")
    s.add_argument("--key-conn-id")
    s.add_argument("--key-file")
    s.add_argument("--selector")
    s.add_argument("--domain")
    s.set_defaults(func=cmd_dkim_record)
