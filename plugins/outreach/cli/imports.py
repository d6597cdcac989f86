"""``outreach import-leads``, ``import show`` and ``import-suppressions``: files into the database."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from outreach.cli.common import cli_who, database_url, positive_int, user_path


def _print_suppressions(given: str, sup) -> None:
    for p in sup.problems:
        print(f"  {given}, {p}")
    print(f"suppressions {given}: added={sup.added} known={sup.known} invalid={sup.invalid} "
          f"cancelled={sup.cancelled}")


def cmd_import_leads(args: argparse.Namespace) -> int:
    """Run ``outreach import-leads``; return the exit code."""
    from outreach.leads import PROGRESS_ROWS, import_leads, progress_line
    from outreach.suppression import import_suppressions

    url = database_url()
    campaign = user_path(args.campaign, "include/campaigns/demo.yaml")
    mailboxes = user_path(args.mailboxes, "include/mailboxes.yaml")
    if args.suppressions:
        _print_suppressions(args.suppressions, import_suppressions(url, user_path(args.suppressions),
                                                                       who=cli_who()))

    def progress(rows: int, seconds: float) -> None:  # stderr: stdout stays the report (--json)
        print(progress_line(args.csv, rows, seconds), file=sys.stderr, flush=True)

    result = import_leads(url, campaign, mailboxes, user_path(args.csv), progress=progress,
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
    """Run ``outreach import-suppressions``; return the exit code."""
    from outreach.suppression import import_suppressions

    _print_suppressions(args.csv, import_suppressions(database_url(), user_path(args.csv), reason=args.reason,
                                                     who=cli_who()))
    return 0


def cmd_import_show(args: argparse.Namespace) -> int:
    """Run ``outreach import show``; return the exit code."""
    from outreach.leads import import_run

    run, problems = import_run(database_url(), args.run_id, page=args.page, page_size=args.page_size)
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


def add_import_leads(sub: Any) -> None:
    """Add ``outreach import-leads`` to the sub-commands ``sub``."""
    s = sub.add_parser("import-leads", help="import a leads CSV into a campaign")
    s.add_argument("--campaign", help="campaign YAML (default: the project's "
                   "include/campaigns/demo.yaml)")
    s.add_argument("--mailboxes", help="mailbox YAML (default: the project's include/mailboxes.yaml)")
    s.add_argument("--csv", required=True, help="leads CSV, relative to the current directory; "
                   "it must lie in an OUTREACH_IMPORT_ROOTS folder (default include/data)")
    s.add_argument("--suppressions", help="a do-not-contact CSV imported first (same rules)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--progress-every", type=positive_int, metavar="ROWS",
                   help="a progress line on stderr every ROWS rows read (default 50,000: "
                   "outreach.leads.PROGRESS_ROWS)")
    s.set_defaults(func=cmd_import_leads)


def add_import(sub: Any) -> None:
    """Add ``outreach import`` to the sub-commands ``sub``."""
    imp = sub.add_parser("import", help="stored import runs")
    impsub = imp.add_subparsers(dest="import_command", required=True)
    s = impsub.add_parser("show", help="an import run's counts, and its stored problems page by page")
    s.add_argument("run_id", type=int)
    s.add_argument("--problems", action="store_true", help="list the stored problems")
    s.add_argument("--page", type=positive_int, default=1, help="page of problems (1-based)")
    s.add_argument("--page-size", type=positive_int, default=50)
    s.set_defaults(func=cmd_import_show)


def add_import_suppressions(sub: Any) -> None:
    """Add ``outreach import-suppressions`` to the sub-commands ``sub``."""
    s = sub.add_parser("import-suppressions", help="import a do-not-contact CSV")
    s.add_argument("csv")
    s.add_argument("--reason", default="do-not-contact")
    s.set_defaults(func=cmd_import_suppressions)
