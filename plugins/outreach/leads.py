"""Lead import from CRM / prospecting CSV exports: one streamed transaction (:func:`import_leads`).

Rows are COPY'd into a stage table as they are read, then duplicates, suppression, the upsert and
enrolment are set-based statements: memory does not grow with the file, bad rows are reported by
line and field, importing twice changes nothing. The file is opened by :mod:`outreach.leadfile`,
read by :mod:`outreach.leadcsv`, each row checked by :mod:`outreach.leadcheck`."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from outreach import campaign as campaign_mod
from outreach import db
from outreach.addresses import normalize_address
from outreach.leadcheck import Problem, StagedRow
from outreach.leadcsv import LeadsCsv, open_leads_csv
from outreach.leadfile import import_path
from outreach.logutil import log
from outreach.paths import resolve
from outreach.store import enrollments as enrollments_store
from outreach.store import import_runs
from outreach.store import leads as leads_store

# Problems returned to the caller in ImportResult.problems (all of them are stored in the
# import_runs row): a file of a million bad rows must not become a million objects in memory.
PROBLEMS_SHOWN = 1000
PROBLEMS_STORED = 100_000  # in outreach.import_runs.problems; the rest are counted (migration 0007)
PROGRESS_ROWS = 50_000  # a progress line every this many rows read (about every 5 s at 10k rows/s)
# Address validation (email-validator, about 12 µs an address once its domain was seen) is the
# largest part of an import's Python time: files from this size on are checked in parallel
# processes when there are enough cores (import_workers).
PARALLEL_FROM_BYTES = 4 << 20  # about 40,000 rows of a typical CRM export
MAX_WORKERS = 8


@dataclass
class ImportResult:
    """What an import did: counts ``imported``, ``updated``, ``duplicate``, ``unchanged``, ``invalid``,
    ``suppressed`` (not stored) and ``enrolled``.

    ``problems``: the first :data:`PROBLEMS_SHOWN` by line (suppressed lines apart, in
    ``suppressed_lines``), ``problems_omitted`` the rest; :data:`PROBLEMS_STORED` are stored."""

    file: str
    campaign_key: str | None
    rows_total: int = 0
    imported: int = 0
    updated: int = 0
    duplicate: int = 0
    unchanged: int = 0
    invalid: int = 0
    suppressed: int = 0
    enrolled: int = 0
    problems: list[Problem] = field(default_factory=list)
    problems_omitted: int = 0
    suppressed_lines: list[int] = field(default_factory=list)
    run_id: int | None = None
    campaign_id: int | None = None
    stopped: int = 0
    """Enrolments stopped because their row left a source (``stop_when_missing``)."""
    overlap_skipped: int = 0
    """Leads enrolled stopped because they are in another campaign's sequence (the campaign's
    ``overlap: skip``; docs/explanation/contact-policy.md)."""
    not_enrolled: int = 0
    """Lines whose lead was stored but not enrolled because the campaign is finished (each is
    a problem with action ``not enrolled``): a finished campaign takes no new leads."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each stage, in order: ``read`` (reading and checking the rows, in this
    process), ``copy`` (writing them to the stage table), ``suppression`` (waiting for it: a
    CSV file's is asked batch by batch while the next batch is read, a source's after all rows),
    ``duplicates``, ``upsert``, ``enrol``, ``record`` (the problems and the run row): where a
    slow import spends its time."""

    def nothing_imported(self) -> str | None:
        """Return why the import did nothing useful — the file had no data rows, or every row
        was invalid — or ``None``. The CLI exits non-zero and the Airflow task fails on it (the
        run and its problems are stored all the same)."""
        if self.rows_total == 0:
            return f"nothing imported: {self.file} has no data rows"
        if self.invalid == self.rows_total:
            return (f"nothing imported: all {self.rows_total} rows of {self.file} are invalid "
                    f"(see the problems; outreach import show {self.run_id} --problems)")
        return None

    def summary(self) -> str:
        """Return the one-line summary for logs."""
        run = f" (run {self.run_id})" if self.run_id is not None else ""
        return (f"import {self.file}{run}: rows={self.rows_total} imported={self.imported} "
                f"updated={self.updated} unchanged={self.unchanged} duplicate={self.duplicate} "
                f"invalid={self.invalid} "
                f"suppressed={self.suppressed} enrolled={self.enrolled}"
                + (f" stopped={self.stopped}" if self.stopped else "")
                + (f" skipped_in_other_campaign={self.overlap_skipped}"
                   if self.overlap_skipped else "")
                + (f" not_enrolled={self.not_enrolled} (campaign {self.campaign_key} is "
                   "finished: it takes no new leads)" if self.not_enrolled else ""))

    def timings(self) -> str:
        """Return :attr:`seconds` for a log line: ``read 34.1 s, suppression 0.0 s, …``."""
        return ", ".join(f"{stage} {s:.1f} s" for stage, s in self.seconds.items())

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (for XCom and ``--json``)."""
        d = asdict(self)
        d["problems"] = [str(p) for p in self.problems]
        return d


# The one address normaliser lives in outreach.addresses; the old name stays for callers.
normalise_address = normalize_address


def progress_line(file: str, rows: int, seconds: float) -> str:
    """Return the progress line of a long import: ``import leads.csv: 50,000 rows read
    (9,800 rows/s)``."""
    rate = f"{rows / seconds:,.0f} rows/s" if seconds > 0 else "rate unknown"
    return f"import {file}: {rows:,} rows read ({rate})"


STAGE_BATCH = 10_000
"""Rows of a CSV import copied into the stage table at a time: each batch's suppression is asked
(``lead_stage_mark_suppressed``, one PostgreSQL core) while the next batch is read and checked
(this process), so the two overlap; at most one batch waits in memory."""


def _stage_rows(conn: Any, leads: LeadsCsv, progress: Callable[[int, float], None] | None,
                every: int, workers: int, seconds: dict[str, float] | None = None) -> None:
    """COPY ``leads`` into the stage table, :data:`STAGE_BATCH` rows a COPY, checked in ``workers``
    processes, each batch's suppression marked in a second thread while the next is read.

    Calls ``progress(rows, seconds)`` every ``every`` rows; errors of either side are raised here.
    ``seconds`` gets the wall seconds of ``copy`` and ``suppression`` waits."""
    from concurrent.futures import Future, ThreadPoolExecutor

    start, next_at = time.monotonic(), every
    batch: list[StagedRow] = []
    asked: Future[None] | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="outreach-import-suppression") as db_thread:

        spent = seconds if seconds is not None else {}

        def wait(future: Future[None]) -> None:
            start = time.monotonic()
            future.result()  # the connection is free again (and its error raised here)
            spent["suppression"] = spent.get("suppression", 0.0) + time.monotonic() - start

        def flush() -> Future[None]:
            if asked is not None:
                wait(asked)
            start = time.monotonic()
            with leads_store.lead_stage_copy(conn) as copy:
                for row in batch:
                    copy.write_row(row)
            spent["copy"] = spent.get("copy", 0.0) + time.monotonic() - start
            return db_thread.submit(leads_store.lead_stage_mark_suppressed, conn,
                                    from_line=batch[0][0], to_line=batch[-1][0])

        for row in leads.staged(workers):
            if progress is not None and leads.rows_total >= next_at:
                progress(leads.rows_total, time.monotonic() - start)
                next_at += every
            batch.append(row)
            if len(batch) >= STAGE_BATCH:
                asked, batch = flush(), []
        if batch:
            asked = flush()
        if asked is not None:
            wait(asked)


def import_workers(path: Path) -> int:
    """Return how many processes check the rows of ``path``: 0 (this one) for a small file, inside a
    daemonic process or on fewer than 4 CPUs, else one per CPU but one, at most :data:`MAX_WORKERS`.

    Why not on 2 cores: docs/reference/benchmarks.md."""
    import multiprocessing
    import os

    if multiprocessing.current_process().daemon:
        return 0
    try:
        if path.stat().st_size < PARALLEL_FROM_BYTES:
            return 0
    except OSError:
        return 0
    cpus = os.cpu_count() or 1
    return 0 if cpus < 4 else min(cpus - 1, MAX_WORKERS)


def import_leads(url: str, campaign_file: str | Path, mailbox_file: str | Path,
                 csv_file: str | Path, *, now: dt.datetime | None = None,
                 progress: Callable[[int, float], None] | None = None,
                 progress_every: int = PROGRESS_ROWS, workers: int | None = None) -> ImportResult:
    """Import a leads CSV into a campaign, in one transaction, streaming the file.

    :param campaign_file: the campaign YAML (synced first, so a new campaign just works).
    :param mailbox_file: the mailbox YAML.
    :param csv_file: the leads CSV, inside an import folder (:func:`import_path`).
    :param now: enrolment time (UTC); default the database clock.
    :param progress: called as ``progress(rows read, seconds)`` every ``progress_every`` rows.
    :param workers: processes that check the rows (0: this one); default :func:`import_workers`.
    :raises ImportFileError: the CSV is outside the import folders, or unusable (file and line
        named); nothing is imported.
    :raises outreach.campaign.ConfigError: a configuration file is invalid."""
    campaign_path, csv_path = resolve(campaign_file), import_path(csv_file)
    campaign = campaign_mod.load_campaign(campaign_path)
    mailboxes = campaign_mod.load_mailboxes(mailbox_file)
    with open_leads_csv(csv_path, campaign) as leads, db.transaction(url) as conn:
        n = import_workers(csv_path) if workers is None else workers
        return apply_staged(conn, campaign, mailboxes, str(campaign_file), str(csv_file),
                            lambda spent: _stage_rows(conn, leads, progress, progress_every,
                                                      n, spent)
                            or (leads.rows_total, leads.invalid), now=now,
                            stage_decides_suppression=True)


def apply_staged(conn: Any, campaign: campaign_mod.Campaign, mailboxes: list[campaign_mod.Mailbox],
                 campaign_file: str, name: str,
                 stage: Callable[[dict[str, float]], tuple[int, int]], *,
                 now: dt.datetime | None = None,
                 stage_decides_suppression: bool = False) -> ImportResult:
    """The import pipeline after reading, in the caller's transaction: sync, stage (``stage(spent)``
    returns ``(rows read, rows skipped)``), then the set-based statements, and store the run.

    Both a CSV file and a campaign's source (:mod:`outreach.sources`) come through here.

    :param name: the file or source named in the run and the summary.
    :param stage_decides_suppression: ``stage()`` already marked every row's suppression.
    :returns: the result, ``run_id`` set."""
    result = ImportResult(file=name, campaign_key=campaign.key)
    # An erasure waits for this import (its suppression check would miss one committed later).
    leads_store.lead_import_hold_off_erasure(conn)
    campaign_id = campaign_mod.sync(conn, campaign, mailboxes, campaign_file)
    result.campaign_id = campaign_id
    leads_store.lead_stage_create(conn)
    leads_store.lead_stage_memory(conn)
    leads_store.lead_stage_index_lines(conn)
    clock = time.monotonic()

    def lap(stage_name: str) -> None:
        nonlocal clock
        result.seconds[stage_name] = time.monotonic() - clock
        clock = time.monotonic()

    spent: dict[str, float] = {}
    result.rows_total, result.invalid = stage(spent)
    lap("read")
    result.seconds["read"] -= spent.get("copy", 0.0) + spent.get("suppression", 0.0)
    result.seconds["copy"] = spent.get("copy", 0.0)
    if not stage_decides_suppression:
        leads_store.lead_stage_mark_suppressed(conn, from_line=None, to_line=None)
    lap("suppression")
    result.seconds["suppression"] += spent.get("suppression", 0.0)
    leads_store.lead_stage_analyze(conn)
    leads_store.lead_stage_mark_duplicates(conn)
    result.not_enrolled = leads_store.lead_stage_mark_campaign_finished(conn,
                                                                        campaign_id=campaign_id)
    counts = leads_store.lead_stage_counts(conn)
    result.duplicate, result.suppressed = counts.duplicate, counts.suppressed
    lap("duplicates")
    upserted = leads_store.lead_upsert_staged(conn)
    result.imported, result.updated = upserted.imported, upserted.updated
    result.unchanged = counts.accepted - result.imported - result.updated
    lap("upsert")
    enrolled = enrollments_store.enrollment_insert_staged(conn, campaign_id=campaign_id, now=now)
    result.enrolled, result.overlap_skipped = enrolled.enrolled, enrolled.skipped
    lap("enrol")
    result.problems = [Problem(**asdict(r))
                       for r in leads_store.lead_stage_problems(conn, limit=PROBLEMS_SHOWN)]
    result.problems_omitted = counts.problems - len(result.problems)
    result.suppressed_lines = leads_store.lead_stage_suppressed_lines(conn, limit=PROBLEMS_SHOWN)
    result.run_id = import_runs.import_run_insert_staged(
        conn, stored=PROBLEMS_STORED, kind="leads", file=name, campaign_key=campaign.key,
        rows_total=result.rows_total, imported=result.imported, updated=result.updated,
        duplicate=result.duplicate, unchanged=result.unchanged, invalid=result.invalid,
        suppressed=result.suppressed, enrolled=result.enrolled)
    lap("record")
    log.info("import %s: seconds %s", name, result.timings())
    return result


def import_run(url: str, run_id: int, *, page: int = 1, page_size: int = 50,
               ) -> tuple[dict[str, Any], list[Problem]]:
    """Return an import run (its ``outreach.import_runs`` row without the problems, plus
    ``problems_stored``) and page ``page`` (1-based) of its stored problems, ``page_size`` a
    page, in the order they were stored (by line; suppressed lines last).

    :raises LookupError: there is no import run ``run_id``.
    :raises ValueError: ``page`` or ``page_size`` is below 1.
    """
    if page < 1 or page_size < 1:
        raise ValueError("--page and --page-size start at 1")
    with db.connect(url, autocommit=True) as conn:
        run = import_runs.import_run_get(conn, id=run_id)
        if run is None:
            raise LookupError(f"no import run {run_id} (outreach report shows the latest)")
        problems = [Problem(**asdict(r)) for r in import_runs.import_run_problems_page(
            conn, id=run_id, limit=page_size, offset=(page - 1) * page_size)]
    return asdict(run), problems
