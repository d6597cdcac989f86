"""The ``outreach`` command line. The DAGs and the CLI call the same functions.

The database is the one the DAGs use (:func:`outreach.airflow.connections.database_url`): the Airflow
connection ``outreach_db``, else ``OUTREACH_DATABASE_URL``, else — with ``OUTREACH_EMBEDDED_DB=1``
only, for development — the embedded PostgreSQL in ``.outreach/pgdata``; with none, every command
that needs the database fails with one line saying what to set. ``outreach demo`` and ``outreach
airflow`` (LocalExecutor) start the embedded server themselves when nothing is set. SMTP
connections are Airflow connections (``AIRFLOW_CONN_<ID>``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from outreach.dev import embedded


def _url() -> str:
    """The outreach database: the DAGs' (:func:`outreach.airflow.connections.database_url`: the
    Airflow connection ``outreach_db``, else ``OUTREACH_DATABASE_URL``), else — only with the
    developer's opt-in ``OUTREACH_EMBEDDED_DB=1`` — the embedded server
    (:func:`outreach.dev.embedded.database_url`).

    :raises outreach.settings.SettingsError: none of them (:data:`outreach.settings.NO_DATABASE`),
        or ``OUTREACH_EMBEDDED_DB`` is neither 1 nor 0.
    """
    from outreach.airflow.connections import database_url
    from outreach.settings import SettingsError

    try:
        return database_url()
    except SettingsError:
        if not embedded.opted_in():
            raise
        return embedded.database_url()


def _user_path(path: str | None, default: str | None = None) -> str | None:
    """A path the user typed, made absolute against the current directory (where the user is);
    ``default`` (a project file, relative to the project root) when none was given."""
    import os

    from outreach.paths import project_root

    if path is None:
        return None if default is None else str(project_root() / default)
    return os.path.abspath(os.path.expanduser(path))


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from outreach.migrate import current_version, upgrade

    url = _url()
    applied = upgrade(url)
    if applied:
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}")
    else:
        print(f"database is up to date (version {current_version(url)})")
    return 0


def cmd_db_stop(args: argparse.Namespace) -> int:
    import os

    print(embedded.stop())
    if os.environ.get("OUTREACH_DATABASE_URL"):
        print("OUTREACH_DATABASE_URL is set: that database is not the product's to stop")
    return 0


def _print_suppressions(given: str, sup) -> None:
    for p in sup.problems:
        print(f"  {given}, {p}")
    print(f"suppressions {given}: added={sup.added} known={sup.known} invalid={sup.invalid} "
          f"cancelled={sup.cancelled}")


def cmd_import_leads(args: argparse.Namespace) -> int:
    from outreach.leads import PROGRESS_ROWS, import_leads, progress_line
    from outreach.suppression import import_suppressions

    url = _url()
    campaign = _user_path(args.campaign, "include/campaigns/demo.yaml")
    mailboxes = _user_path(args.mailboxes, "include/mailboxes.yaml")
    if args.suppressions:
        _print_suppressions(args.suppressions, import_suppressions(url, _user_path(args.suppressions)))

    def progress(rows: int, seconds: float) -> None:  # stderr: stdout stays the report (--json)
        print(progress_line(args.csv, rows, seconds), file=sys.stderr, flush=True)

    result = import_leads(url, campaign, mailboxes, _user_path(args.csv), progress=progress,
                          progress_every=args.progress_every or PROGRESS_ROWS)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        # Problems first, the summary last: it is what the user reads when the output stops.
        for p in result.problems:
            print(f"  {args.csv}, {p}")
        if result.problems_omitted:
            print(f"  … and {result.problems_omitted} more problems "
                  f"(outreach import show {result.run_id} --problems)")
        if result.suppressed_lines:
            print(f"  suppressed (not stored): lines {result.suppressed_lines}")
        print(result.summary())
    if (why := result.nothing_imported()) is not None:
        print(f"outreach: error: {why}", file=sys.stderr)
        return 1
    return 0


def cmd_import_suppressions(args: argparse.Namespace) -> int:
    from outreach.suppression import import_suppressions

    _print_suppressions(args.csv, import_suppressions(_url(), _user_path(args.csv), reason=args.reason))
    return 0


def cmd_import_show(args: argparse.Namespace) -> int:
    from outreach.leads import import_run

    run, problems = import_run(_url(), args.run_id, page=args.page, page_size=args.page_size)
    print(f"import run {run['id']} ({run['kind']}, {run['created_at']:%Y-%m-%d %H:%M:%S %Z}): "
          f"{run['file']}" + (f" into {run['campaign_key']}" if run["campaign_key"] else ""))
    print(f"  rows={run['rows_total']} imported={run['imported']} updated={run['updated']} "
          f"unchanged={run['unchanged']} duplicate={run['duplicate']} invalid={run['invalid']} "
          f"suppressed={run['suppressed']} enrolled={run['enrolled']}")
    stored, omitted = run["problems_stored"], run["problems_omitted"]
    pages = max(1, -(-stored // args.page_size))
    if not args.problems:
        print(f"  problems: {stored} stored" + (f", {omitted} more counted" if omitted else "")
              + (f" (outreach import show {run['id']} --problems)" if stored else ""))
        return 0
    first = (args.page - 1) * args.page_size
    for p in problems:
        print(f"  {p}")
    shown = f"{first + 1}–{first + len(problems)}" if problems else "none"
    nxt = (f"; next: outreach import show {run['id']} --problems --page {args.page + 1}"
           if args.page < pages else "")
    print(f"problems {shown} of {stored} (page {args.page} of {pages}{nxt})"
          + (f"; {omitted} more were counted, not stored" if omitted else ""))
    return 0


def _operator() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def cmd_suppress(args: argparse.Namespace) -> int:
    from outreach import db
    from outreach.suppression import suppress

    with db.transaction(_url()) as conn:
        added, cancelled = suppress(conn, args.value, args.reason, args.source,
                                    actor=args.by or _operator())
    print(f"{'suppressed' if added else 'already suppressed'}; cancelled {cancelled} queued email(s)")
    return 0


def cmd_unsuppress(args: argparse.Namespace) -> int:
    from outreach import db
    from outreach.suppression import unsuppress

    with db.transaction(_url()) as conn:
        result = unsuppress(conn, args.value, actor=args.by or _operator(), note=args.reason)
    if not result.removed:
        print(f"{result.kind} {result.value} was not suppressed; nothing changed")
        return 1
    print(f"unsuppressed {result.kind} {result.value} (was: {result.reason}); recorded in "
          "outreach.suppression_events. Emails it cancelled stay cancelled.")
    if result.still_suppressed:
        print(f"  note: {result.value} is still suppressed by another entry (a whole-domain "
              "suppression?)")
    return 0


def cmd_serve_unsubscribe(args: argparse.Namespace) -> int:
    import uvicorn

    from outreach.airflow.connections import unsubscribe_secret
    from outreach.web.unsubscribe_app import create_app

    unsubscribe_secret()  # refuse to start without a secret rather than answer 503 later
    app = create_app(_url, unsubscribe_secret)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning",
                proxy_headers=True, server_header=False)
    return 0


def _dkim_key(conn_id: str | None, key_file: str | None) -> bytes | None:
    if key_file:
        from pathlib import Path

        return Path(key_file).read_bytes()
    if conn_id:
        from outreach.airflow.connections import dkim_private_key

        return dkim_private_key(conn_id)
    return None


def cmd_preflight(args: argparse.Namespace) -> int:
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
    from outreach.signing import public_key_record

    key = _dkim_key(args.key_conn_id, args.key_file)
    if key is None:
        print("outreach: error: give --key-conn-id or --key-file", file=sys.stderr)
        return 1
    name = f"{args.selector}._domainkey.{args.domain}" if args.selector and args.domain else "<selector>._domainkey.<domain>"
    print(f"{name} TXT \"{public_key_record(key)}\"")
    return 0


def cmd_queue_due(args: argparse.Namespace) -> int:
    from outreach.queue import held_line, queue_due

    result = queue_due(_url(), campaign_key=args.campaign)
    for h in result["held"]:
        print(f"  {held_line(h)}")
    print(f"queued {result['queued']} email(s)")
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    from outreach.airflow.connections import dkim_private_key, smtp_connector
    from outreach.airflow.connections import settings as load_settings
    from outreach.send import MailboxUnreachable, send_run

    settings = load_settings()
    if args.limit:  # validated like OUTREACH_BATCH_SIZE
        settings = settings.replace(batch_size=args.limit)
    url = _url()
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


def cmd_inbox(args: argparse.Namespace) -> int:
    from outreach import db
    from outreach.airflow.connections import optional_unsubscribe_secret, imap_account
    from outreach.inbox import InboxError, plan_targets, read_target
    from outreach.mailboxes import find_mailbox

    url = _url()
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
    for t in targets:
        try:
            print(read_target(url, t, imap_account, unsubscribe_secret=secret).line(), flush=True)
        except InboxError as exc:
            print(exc.summary.line(), flush=True)
            failed.append(str(exc))
    for line in failed:
        print(f"outreach: error: {line}", file=sys.stderr)
    return 1 if failed else 0


def cmd_unconfirmed(args: argparse.Namespace) -> int:
    from outreach.airflow.connections import imap_account
    from outreach.resolve import describe_unconfirmed, list_unconfirmed, row_message_id, sent_evidence

    rows = list_unconfirmed(_url(), campaign_key=args.campaign, mailbox=args.mailbox)
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
    from outreach.resolve import resolve, resolve_found

    if args.auto_found:
        from outreach.airflow.connections import imap_account

        if args.decision or args.ids:
            raise ValueError("--auto-found decides by itself: give no --decision or --ids")
        result = resolve_found(_url(), args.by, imap_account, campaign_key=args.campaign,
                               mailbox=args.mailbox)
        print(result.line())
        return 0
    if not args.decision:
        raise ValueError("give --decision was-sent|not-sent, or --auto-found")
    ids = [int(x) for x in args.ids.split(",")] if args.ids else None
    result = resolve(_url(), args.decision.replace("-", "_"), args.by, ids=ids,
                     campaign_key=args.campaign, mailbox=args.mailbox, note=args.note)
    print(result.line())
    return 0


def cmd_requeue(args: argparse.Namespace) -> int:
    from outreach.resolve import requeue_failed

    ids = [int(x) for x in args.ids.split(",")] if args.ids else None
    result = requeue_failed(_url(), args.failed_kind.replace("-", "_"), args.by, args.reason,
                            ids=ids, campaign_key=args.campaign, mailbox=args.mailbox)
    print(result.line())
    return 0


def _print_verdicts(verdicts: list, rule: str) -> None:
    for v in verdicts:
        print(f"mailbox {v.mailbox_id} ({v.mailbox}) {'paused' if v.paused else 'already paused'}:"
              f" {v.reason}")
    if not verdicts:
        print(f"no active mailbox above the {rule} threshold")


def cmd_mailbox(args: argparse.Namespace) -> int:
    from outreach import mailboxes

    url = _url()
    if args.mailbox_command == "pause":
        print(mailboxes.pause_mailbox(url, args.mailbox, args.reason, args.by).line())
    elif args.mailbox_command == "resume":
        print(mailboxes.resume_mailbox(url, args.mailbox, args.by, args.reason).line())
    elif args.mailbox_command == "history":
        events = mailboxes.mailbox_events(url, args.mailbox)
        for e in events:
            print(f"{e['created_at']:%Y-%m-%d %H:%M %Z}  mailbox {e['mailbox_id']} ({e['address']})"
                  f"  {e['event']} by {e['actor']}: {e['reason']}")
        if not events:
            print("no pause or resume events" + (f" for mailbox {args.mailbox}" if args.mailbox else ""))
    elif args.mailbox_command == "check":
        from outreach.cli.logincheck import check_mailbox

        address, checks = check_mailbox(url, args.mailbox,
                                        _user_path(args.file, "include/mailboxes.yaml"))
        print(f"mailbox {address}:")
        for c in checks:
            print("  " + c.line())
        return 0 if all(c.ok for c in checks) else 1
    elif args.mailbox_command == "sync":
        from outreach.campaign import sync_mailboxes

        ids = sync_mailboxes(url, args.file)
        print(f"synced {len(ids)} mailbox(es) from {args.file}")
    elif args.mailbox_command == "check-bounces":
        from outreach.health import HealthSettings, pause_on_bounce_rate

        h = HealthSettings.from_env()
        _print_verdicts(pause_on_bounce_rate(url, threshold=h.bounce_rate_threshold,
                                             min_sends=h.bounce_min_sends,
                                             window_days=h.bounce_window_days), "bounce-rate")
    elif args.mailbox_command == "check-complaints":
        from outreach.health import HealthSettings, pause_on_complaint_rate

        h = HealthSettings.from_env()
        _print_verdicts(pause_on_complaint_rate(url, threshold=h.complaint_rate_threshold,
                                                min_sends=h.bounce_min_sends,
                                                window_days=h.bounce_window_days), "complaint-rate")
    elif args.mailbox_command == "check-spam-rate":
        from outreach.health import HealthSettings, pause_on_spam_rate

        h = HealthSettings.from_env()
        _print_verdicts(pause_on_spam_rate(url, threshold=h.spam_rate_threshold), "spam-rate")
    return 0


def cmd_lead(args: argparse.Namespace) -> int:
    from outreach.enrollments import stop_lead

    if args.lead_command == "stop":
        print(stop_lead(_url(), args.address, args.campaign, args.reason, args.by).line())
    return 0


def cmd_campaign(args: argparse.Namespace) -> int:
    from outreach import campaign_pause

    url = _url()
    if args.campaign_command == "pause":
        print(campaign_pause.pause_campaign(url, args.campaign, args.reason, args.by).line())
    elif args.campaign_command == "resume":
        print(campaign_pause.resume_campaign(url, args.campaign, args.by, args.reason).line())
    elif args.campaign_command == "history":
        events = campaign_pause.campaign_events(url, args.campaign)
        for e in events:
            print(f"{e['created_at']:%Y-%m-%d %H:%M %Z}  campaign {e['key']}  {e['event']} by "
                  f"{e['actor']}: {e['reason']}")
        if not events:
            print("no pause or resume events" + (f" for campaign {args.campaign}" if args.campaign else ""))
    return 0


def cmd_transactional(args: argparse.Namespace) -> int:
    from outreach import db, transactional
    from outreach.airflow.connections import dkim_private_key, settings as load_settings, smtp_connector

    url = _url()
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

        with db.connect(url, autocommit=True) as conn:
            row = db.one(conn, "transactional_by_key", {"delivery_key": args.key})
        if row is None:
            print(f"no email has delivery key {args.key!r}")
            return 1
        print(f"email {row['id']} to {mask(row['recipient'])} ({row['template']}): {row['status']}"
              + (f"/{row['failure_kind']}" if row["failure_kind"] else "")
              + f", {row['attempts']} attempt(s)"
              + (f", Message-ID <{row['message_id']}> accepted {row['accepted_at']:%Y-%m-%d %H:%M:%S} UTC"
                 if row["message_id"] else "")
              + (f" - {row['last_error']}" if row["last_error"] else ""))
    return 0


def cmd_postmaster(args: argparse.Namespace) -> int:
    from outreach.airflow.connections import postmaster_credentials
    from outreach.health import HealthSettings
    from outreach.postmaster import PostmasterClient, fetch_and_store

    h = HealthSettings.from_env()
    client = PostmasterClient(postmaster_credentials(), base_url=h.postmaster_base_url)
    summary = fetch_and_store(_url(), client, days=args.days or h.postmaster_days)
    for domain, d in summary.domains.items():
        print(f"{domain} {summary.start}..{summary.end}: {d['days_known']} day(s) with data, "
              f"{d['days_unknown']} unknown; compliance needs work: {d['needs_work'] or 'nothing'}")
    if not summary.domains:
        print("no mailboxes, no domains")
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    from outreach.airflow.connections import settings as load_settings
    from outreach.queue import reap

    reaped = reap(_url(), load_settings().reaper_threshold)
    print(f"marked {len(reaped.unconfirmed)} email(s) unconfirmed (handed over, outcome unknown)"
          + (f": {reaped.unconfirmed}" if reaped.unconfirmed else ""))
    print(f"put {len(reaped.requeued)} email(s) back in the queue (never handed over)"
          + (f": {reaped.requeued}" if reaped.requeued else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from outreach.report import collect, render_json, render_text

    report = collect(_url())
    print(render_json(report) if args.json else render_text(report))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from outreach.dev.demo import run_demo

    return run_demo()


def cmd_airflow(args: argparse.Namespace) -> int:
    from outreach.dev.deploy import run_foreground

    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    return run_foreground(args.executor, args.workers)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser (sub-commands: db upgrade, db stop, import-leads, import-suppressions,
    suppress, unsuppress, queue-due, send, inbox, unconfirmed, resolve, mailbox, lead, campaign,
    transactional, postmaster, reap, report,
    serve-unsubscribe, preflight, dkim-record, airflow, demo)."""
    p = argparse.ArgumentParser(prog="outreach", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    dbp = sub.add_parser("db", help="the database: schema, the embedded server")
    dbsub = dbp.add_subparsers(dest="db_command", required=True)
    dbsub.add_parser("upgrade", help="apply pending migrations").set_defaults(func=cmd_db_upgrade)
    dbsub.add_parser("stop", help="stop the embedded PostgreSQL of .outreach/pgdata, if it runs "
                     "(whoever started it)").set_defaults(func=cmd_db_stop)

    s = sub.add_parser("import-leads", help="import a leads CSV into a campaign")
    s.add_argument("--campaign", help="campaign YAML (default: the project's "
                   "include/campaigns/demo.yaml)")
    s.add_argument("--mailboxes", help="mailbox YAML (default: the project's include/mailboxes.yaml)")
    s.add_argument("--csv", required=True, help="leads CSV, relative to the current directory; "
                   "it must lie in an OUTREACH_IMPORT_ROOTS folder (default include/data)")
    s.add_argument("--suppressions", help="a do-not-contact CSV imported first (same rules)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--progress-every", type=_positive, metavar="ROWS",
                   help="a progress line on stderr every ROWS rows read (default 50,000: "
                   "outreach.leads.PROGRESS_ROWS)")
    s.set_defaults(func=cmd_import_leads)

    imp = sub.add_parser("import", help="stored import runs")
    impsub = imp.add_subparsers(dest="import_command", required=True)
    s = impsub.add_parser("show", help="an import run's counts, and its stored problems page by page")
    s.add_argument("run_id", type=int)
    s.add_argument("--problems", action="store_true", help="list the stored problems")
    s.add_argument("--page", type=_positive, default=1, help="page of problems (1-based)")
    s.add_argument("--page-size", type=_positive, default=50)
    s.set_defaults(func=cmd_import_show)

    s = sub.add_parser("import-suppressions", help="import a do-not-contact CSV")
    s.add_argument("csv")
    s.add_argument("--reason", default="do-not-contact")
    s.set_defaults(func=cmd_import_suppressions)

    s = sub.add_parser("suppress", help="suppress an address or a whole domain (@acme.com)")
    s.add_argument("value")
    s.add_argument("--reason", default="manual")
    s.add_argument("--source", default="cli")
    s.add_argument("--by", help="who is doing it (default: the login name)")
    s.set_defaults(func=cmd_suppress)

    s = sub.add_parser("unsuppress", help="remove a suppression, recording who and why")
    s.add_argument("value", help="an address, or a whole domain (@acme.com)")
    s.add_argument("--reason", required=True, help="why (for example a ticket reference)")
    s.add_argument("--by", help="who is doing it (default: the login name)")
    s.set_defaults(func=cmd_unsuppress)

    s = sub.add_parser("serve-unsubscribe", help="run the one-click unsubscribe service (uvicorn)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8025)
    s.set_defaults(func=cmd_serve_unsubscribe)

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

    s = sub.add_parser("dkim-record", help="print the DKIM TXT record for a private key")
    s.add_argument("--key-conn-id")
    s.add_argument("--key-file")
    s.add_argument("--selector")
    s.add_argument("--domain")
    s.set_defaults(func=cmd_dkim_record)

    s = sub.add_parser("queue-due", help="queue every due sequence step")
    s.add_argument("--campaign", help="only this campaign key")
    s.set_defaults(func=cmd_queue_due)

    s = sub.add_parser("send", help="one send run: plan, then claim and send each planned batch")
    s.add_argument("--mailbox", type=int, help="mailbox id")
    s.add_argument("--limit", type=int, help="rows to claim at most (default OUTREACH_BATCH_SIZE)")
    s.add_argument("--until-empty", action="store_true", help="keep claiming until nothing is due")
    s.set_defaults(func=cmd_send)

    s = sub.add_parser("inbox", help="read each mailbox's inbox: replies, bounces, complaints, "
                       "unsubscribes")
    s.add_argument("--mailbox", help="only this mailbox (address or id)")
    s.set_defaults(func=cmd_inbox)

    s = sub.add_parser("unconfirmed", help="list unconfirmed emails (a person must decide)")
    s.add_argument("--campaign")
    s.add_argument("--mailbox", help="address or id")
    s.set_defaults(func=cmd_unconfirmed)

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

    s = sub.add_parser("requeue", help="put emails that failed without being accepted "
                       "(retries exhausted) back in the queue, recording who and why")
    s.add_argument("--failed-kind", required=True, choices=["retries_exhausted"],
                   help="only not-accepted failures; unconfirmed ones: `outreach resolve`")
    s.add_argument("--ids", help="comma-separated email ids")
    s.add_argument("--campaign")
    s.add_argument("--mailbox", help="address or id")
    s.add_argument("--by", required=True, help="who decides (recorded)")
    s.add_argument("--reason", required=True, help="why (recorded)")
    s.set_defaults(func=cmd_requeue)

    mbp = sub.add_parser("mailbox", help="pause or resume a mailbox, its history, health checks")
    mbsub = mbp.add_subparsers(dest="mailbox_command", required=True)
    for name, help_, reason_help in (
            ("pause", "pause a mailbox: it sends nothing until resumed", "why (recorded)"),
            ("resume", "resume a paused mailbox (cap and pacing still apply)", "why (recorded)")):
        s = mbsub.add_parser(name, help=help_)
        s.add_argument("mailbox", metavar="ADDRESS_OR_ID")
        s.add_argument("--by", required=True, help="who (recorded)")
        s.add_argument("--reason", required=True, help=reason_help)
    s = mbsub.add_parser("history", help="pause/resume history, newest first")
    s.add_argument("mailbox", metavar="ADDRESS_OR_ID", nargs="?")
    s = mbsub.add_parser("check", help="try the mailbox's SMTP and IMAP logins (password or "
                         "OAuth 2.0) and say what works")
    s.add_argument("mailbox", metavar="ADDRESS_OR_ID")
    s.add_argument("--file", help="mailbox YAML whose 'auth' the logins must match (default: "
                   "the project's include/mailboxes.yaml)")
    s = mbsub.add_parser("sync", help="write every mailbox of the mailbox file to the database")
    s.add_argument("--file", default="include/mailboxes.yaml")
    mbsub.add_parser("check-bounces", help="pause mailboxes above the hard-bounce rate threshold")
    mbsub.add_parser("check-complaints",
                     help="pause mailboxes above the complaint-rate threshold (ARF reports read)")
    mbsub.add_parser("check-spam-rate",
                     help="pause mailboxes above the spam-rate threshold (stored Postmaster figures)")
    mbp.set_defaults(func=cmd_mailbox)

    ldp = sub.add_parser("lead", help="operator controls of one lead")
    ldsub = ldp.add_subparsers(dest="lead_command", required=True)
    s = ldsub.add_parser("stop", help="stop a lead's enrolment in a campaign: its queued steps are "
                         "cancelled and it gets nothing more in that campaign (final)")
    s.add_argument("address")
    s.add_argument("--campaign", required=True, help="the campaign key")
    s.add_argument("--by", required=True, help="who (recorded)")
    s.add_argument("--reason", required=True, help="why (recorded)")
    ldp.set_defaults(func=cmd_lead)

    cpp = sub.add_parser("campaign", help="pause or resume a campaign, its history")
    cpsub = cpp.add_subparsers(dest="campaign_command", required=True)
    for name, help_ in (("pause", "pause a campaign: none of its steps is queued or claimed "
                                  "until resumed"),
                        ("resume", "resume a paused campaign (cap and pacing still apply)")):
        s = cpsub.add_parser(name, help=help_)
        s.add_argument("campaign", metavar="KEY")
        s.add_argument("--by", required=True, help="who (recorded)")
        s.add_argument("--reason", required=True, help="why (recorded)")
    s = cpsub.add_parser("history", help="pause/resume history, newest first")
    s.add_argument("campaign", metavar="KEY", nargs="?")
    cpp.set_defaults(func=cmd_campaign)

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

    s = sub.add_parser("postmaster", help="fetch Postmaster Tools figures (connection outreach_postmaster)")
    s.add_argument("--days", type=int, help="days to fetch, today included (default 14)")
    s.set_defaults(func=cmd_postmaster)

    sub.add_parser("reap", help="take back rows left 'sending' too long: unconfirmed if handed "
                   "over, else back in the queue").set_defaults(func=cmd_reap)

    s = sub.add_parser("report", help="per campaign, step and mailbox")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("airflow", help="run Airflow on this machine (api-server, scheduler, "
                       "dag-processor, triggerer[, Celery workers]) until Ctrl-C")
    s.add_argument("--executor", choices=["local", "celery"], default="local",
                   help="local: LocalExecutor (the embedded PostgreSQL unless configured); celery: "
                        "CeleryExecutor on OUTREACH_DATABASE_URL and REDIS_URL")
    s.add_argument("--workers", type=int, default=2, help="Celery workers (default 2)")
    s.set_defaults(func=cmd_airflow)
    sub.add_parser("demo", help="run the main job on the sample data with real Airflow").set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code (1 on a user-facing error, with its message on stderr)."""
    from outreach.campaign import ConfigError
    from outreach.db import OutreachDBError
    from outreach.dev.embedded import StopError
    from outreach.leads import ImportFileError
    from outreach.postmaster import PostmasterError
    import psycopg

    from outreach.send import BatchAborted, MailboxUnreachable
    from outreach.settings import SettingsError, SettingValueError
    from outreach.signing import SigningError

    import os

    from outreach.paths import project_root

    # The CLI reads Airflow connections; keep Airflow's files in the project, not in ~/airflow.
    os.environ.setdefault("AIRFLOW_HOME", str(project_root() / ".airflow"))
    from outreach.dev.deploy import load_dotenv_file

    load_dotenv_file(project_root() / ".env")  # like `make airflow`; the environment wins
    import signal

    def _terminate(signum, frame):  # noqa: ARG001
        # Turn SIGTERM into an exception so an interrupted batch records its handed-off row as
        # unconfirmed and puts the rows it never touched back in the queue (see outreach.send).
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    # The commands print their own summaries; the log repeats them only with -v.
    logging.getLogger("outreach").setLevel(logging.INFO if args.verbose else logging.WARNING)
    # The embedded server's own progress lines ("cleaning last handle …") would land on stdout
    # (Airflow's logging writes there) and break `outreach report --json`.
    logging.getLogger("pgserver").setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except BrokenPipeError:
        # `outreach report --json | head`: the reader went away; that is not an error.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except psycopg.errors.UndefinedTable as exc:  # a database nobody has upgraded yet
        print(f"outreach: error: the outreach database has no schema yet "
              f"({(str(exc).strip().splitlines() or [''])[0]}): run `outreach db upgrade` first",
              file=sys.stderr)
        return 1
    except psycopg.OperationalError as exc:  # the database went away outside a send's own handling
        print(f"outreach: error: database connection lost ({type(exc).__name__}): "
              f"{(str(exc).strip().splitlines() or [''])[0]}", file=sys.stderr)
        return 1
    except SettingValueError as exc:  # a bad OUTREACH_* value: the usage is wrong, like argparse
        print(f"outreach: error: {exc}", file=sys.stderr)
        return 2
    except (ConfigError, ImportFileError, SettingsError, OutreachDBError, SigningError,
            PostmasterError, StopError, MailboxUnreachable, BatchAborted, LookupError, OSError,
            ValueError) as exc:
        print(f"outreach: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
