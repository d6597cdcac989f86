"""``make bench``: every hot path against its raw baseline and the peers, in the same run.

    python bench/run.py [--claim-rows N] [--import-rows N] … [--out bench/results/latest.md]

Prints the results table and writes it, with the machine, versions, sizes and every run's
figure, to ``--out``. Uses ``OUTREACH_BENCH_ADMIN_URL`` (a role that may create databases) or a
fresh embedded PostgreSQL. No timing is asserted; a missed target is reported with why.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_claim
import bench_fanout
import bench_import
import bench_latency
import bench_page
import bench_scaleout
import bench_send
from common import BENCH, Report, Server, machine, write_report

PATHS = ("claim", "send", "latency", "import", "fanout", "scaleout", "page")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the sizes (every one a parameter; defaults finish in about 15 minutes on 2 cores)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--claim-rows", type=int, default=10_000, help="queued items per claim run")
    p.add_argument("--claimers", default="1,2,8", help="concurrent claimers, comma-separated")
    p.add_argument("--claim-batch", type=int, default=50, help="rows per claim (and PgQueuer batch)")
    p.add_argument("--claim-systems", default=",".join(bench_claim.SYSTEMS),
                   help="claim systems to measure, comma-separated (ours always)")
    p.add_argument("--claim-mailboxes", type=int, default=4, help="mailboxes the rows are spread over")
    p.add_argument("--send-emails", type=int, default=300, help="emails per send-path run")
    p.add_argument("--latency-delay", type=float, default=0.1,
                   help="seconds the latency sink waits before each reply to a command")
    p.add_argument("--latency-parallelism", default="1,4,16",
                   help="OUTREACH_SEND_PARALLELISM values for the latency rows, comma-separated")
    p.add_argument("--latency-batch", type=int, default=50,
                   help="OUTREACH_BATCH_SIZE for the latency rows (rows per mapped task)")
    p.add_argument("--latency-mailboxes", type=int, default=4,
                   help="mailboxes the latency rows' queue is spread over")
    p.add_argument("--import-rows", type=int, default=100_000, help="rows of the generated CSV")
    p.add_argument("--fanout-tasks", type=int, default=4, help="mapped send tasks")
    p.add_argument("--fanout-batch", type=int, default=50, help="emails per mapped task")
    p.add_argument("--fanout-delay", type=float, default=0.1,
                   help="seconds the fan-out sink waits before each reply to a command (the "
                   "row is measured at this and at 0)")
    p.add_argument("--scaleout-emails", type=int, default=200,
                   help="emails per scale-out run (real Airflow, LocalExecutor and Celery)")
    p.add_argument("--scaleout-batch", type=int, default=25,
                   help="rows per mapped send task at least (each of the rule's batches a run "
                   "takes its share of the emails)")
    p.add_argument("--scaleout-slots", type=int, default=4,
                   help="send slots per worker (OUTREACH_WORKER_SEND_SLOTS of the sizing rule)")
    p.add_argument("--scaleout-sessions", type=int, default=4,
                   help="SMTP sessions per mailbox (OUTREACH_SESSIONS_PER_MAILBOX of the sizing rule)")
    p.add_argument("--scaleout-delay", type=float, default=0.1,
                   help="seconds the scale-out sink waits before each reply to a command")
    p.add_argument("--scaleout-workers", default="1,2,4", help="Celery workers, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="runs per figure (the median is shown)")
    p.add_argument("--only", default=",".join(PATHS), help=f"subset of {','.join(PATHS)}")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "latest.md")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks and write the report; return the exit code (0)."""
    args = parse_args(argv)
    logging.getLogger("outreach").setLevel(logging.WARNING)
    only = set(args.only.split(","))
    sizes = {k: getattr(args, k) for k in ("claim_rows", "claimers", "claim_batch",
                                             "claim_mailboxes", "claim_systems", "send_emails", "latency_delay",
                                             "latency_parallelism", "latency_batch",
                                             "latency_mailboxes", "import_rows",
                                             "fanout_tasks", "fanout_batch", "fanout_delay",
                                             "scaleout_emails",
                                             "scaleout_batch", "scaleout_slots", "scaleout_sessions",
                                             "scaleout_delay",
                                             "scaleout_workers", "repeats")}
    report = Report(sizes=sizes)
    workdir = Path(tempfile.mkdtemp(prefix="outreach-bench-"))
    # The generated lead files live in the work folder: let imports read them (children inherit).
    os.environ["OUTREACH_IMPORT_ROOTS"] = os.pathsep.join(
        [os.environ.get("OUTREACH_IMPORT_ROOTS", "include/data"), str(Path(workdir).resolve())])
    server = Server(workdir)
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    try:
        version = server.version()
        steps = {
            "claim": lambda: bench_claim.bench(
                server, workdir, rows=args.claim_rows,
                concurrency=[int(c) for c in args.claimers.split(",")], batch=args.claim_batch,
                mailboxes=args.claim_mailboxes, repeats=args.repeats,
                systems=tuple(args.claim_systems.split(","))),
            "send": lambda: bench_send.bench(server, workdir, emails=args.send_emails,
                                             mailboxes=2, repeats=args.repeats),
            "latency": lambda: bench_latency.bench(
                server, workdir, delay=args.latency_delay,
                parallelism=[int(p) for p in args.latency_parallelism.split(",")],
                batch=args.latency_batch, mailboxes=args.latency_mailboxes, repeats=args.repeats),
            "import": lambda: bench_import.bench(server, workdir, leads=args.import_rows,
                                                 repeats=args.repeats),
            "fanout": lambda: bench_fanout.bench(server, workdir, tasks=args.fanout_tasks,
                                                 batch=args.fanout_batch, delay=args.fanout_delay,
                                                 repeats=args.repeats),
            "scaleout": lambda: bench_scaleout.bench(
                server, workdir, emails=args.scaleout_emails, batch=args.scaleout_batch,
                slots=args.scaleout_slots, sessions=args.scaleout_sessions, delay=args.scaleout_delay,
                workers=[int(w) for w in args.scaleout_workers.split(",")], mailboxes=4,
                repeats=args.repeats),
            "page": lambda: bench_page.bench(server, workdir, repeats=args.repeats),
        }
        for name in PATHS:
            if name in only:
                print(f"bench: {name} …", flush=True)
                rows, details = steps[name]()
                report.rows += rows
                report.details += details
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)
    # The machine may be shared: what else ran shows in its load (2 cores: 2.0 is full).
    report.notes.append("load average (1, 5, 15 min) at the start "
                        + ", ".join(f"{x:.1f}" for x in load_at_start) + "; at the end "
                        + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    report.notes.append(f"whole run {time.perf_counter() - started:.0f} s; PostgreSQL "
                        f"{'embedded (pgserver, Unix socket)' if server.embedded else 'OUTREACH_BENCH_ADMIN_URL'}")
    text = write_report(report, args.out, machine(version))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
