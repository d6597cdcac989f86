"""What every benchmark shares: the PostgreSQL server and its databases, the bench-only named
queries (``bench/queries.sql``), timing (median of several runs), the machine's description, and
the result rows that ``bench/run.py`` prints and writes to ``bench/results/latest.md``.

No benchmark asserts a time: a figure that misses its target is reported with why.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import math
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
if "AIRFLOW_HOME" not in os.environ:
    # Made once, by the first process that imports this module, and removed when it exits; its
    # children inherit the variable. (setdefault's argument made a folder in every child process
    # and left it: ~60 empty folders in /tmp a run of `make bench`.)
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="outreach-bench-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
for _p in (str(ROOT / "plugins"), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import psycopg  # noqa: E402 - after sys.path gets plugins/ and bench/
from psycopg import sql  # noqa: E402 - after sys.path gets plugins/ and bench/

from outreach import db  # noqa: E402 - after sys.path gets plugins/ and bench/
from outreach.dev import embedded  # noqa: E402 - after sys.path gets plugins/ and bench/
from outreach.migrate import upgrade  # noqa: E402 - after sys.path gets plugins/ and bench/

PROCESSES = multiprocessing.get_context("forkserver")
"""How the benchmarks start their worker processes: forked from one server process that has
imported ``__main__`` (bench/run.py: every bench module, psycopg, outreach) and what the workers
import late (the claim and send paths, the peers) once. With ``spawn`` each process paid its own
imports, ~2 CPU-seconds, 55 processes in the claim rows alone; the timed part starts after every
process is ready (a barrier) either way."""
PROCESSES.set_forkserver_preload(["__main__", "outreach.claim", "outreach.send", "outreach.leads",
                                  "procrastinate", "pgqueuer", "asyncpg"])

CAMPAIGN = ROOT / "include" / "campaigns" / "demo.yaml"
PACKAGES = ("psycopg", "apache-airflow", "apache-airflow-providers-smtp", "dkimpy", "cryptography",
            "aiosmtpd", "email-validator", "jinja2", "procrastinate", "pgqueuer", "asyncpg")


@functools.cache
def queries() -> dict[str, str]:
    """Return the bench-only named queries of ``bench/queries.sql``."""
    return db.parse_queries((BENCH / "queries.sql").read_text(encoding="utf-8"), "bench/queries.sql")


def run(conn: psycopg.Connection, name: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Execute a bench-only named query; return its rows (``[]`` when it returns none)."""
    cur = conn.execute(queries()[name], params)
    return cur.fetchall() if cur.description else []


class Server:
    """The PostgreSQL server the benchmarks run on: ``OUTREACH_BENCH_ADMIN_URL`` (a role that may
    create databases), else a fresh embedded pgserver in ``workdir`` (stopped at exit).

    Every database it creates is named ``outreach_bench_*`` and dropped by :meth:`close`.
    """

    def __init__(self, workdir: Path) -> None:
        self.admin = os.environ.get("OUTREACH_BENCH_ADMIN_URL") or embedded.start(
            workdir / "pg", stop_at_exit=True)
        self.embedded = "OUTREACH_BENCH_ADMIN_URL" not in os.environ
        self.created: list[str] = []

    def _admin(self, query: str, **idents: str) -> None:
        stmt = sql.SQL(queries()[query]).format(**{k: sql.Identifier(v) for k, v in idents.items()})
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(stmt)

    def create(self, name: str, template: str | None = None) -> str:
        """(Re)create database ``outreach_bench_<name>``, empty or cloned from ``template`` (a name
        given to an earlier :meth:`create`); return its URL."""
        full = f"outreach_bench_{name}"
        self.drop(name)
        if template:
            self._admin("bench_database_clone", name=full, template=f"outreach_bench_{template}")
        else:
            self._admin("bench_database_create", name=full)
        self.created.append(full)
        return self.url(name)

    def url(self, name: str) -> str:
        """Return the URL of database ``outreach_bench_<name>``."""
        return embedded.with_database(self.admin, f"outreach_bench_{name}")

    def migrated(self, name: str) -> str:
        """Create database ``name`` with every outreach migration applied; return its URL."""
        url = self.create(name)
        upgrade(url)
        return url

    def drop(self, name: str) -> None:
        """Drop database ``outreach_bench_<name>`` if it exists."""
        self._admin("bench_database_drop", name=f"outreach_bench_{name}")

    def version(self) -> str:
        """Return the server's version string."""
        with psycopg.connect(self.admin) as conn:
            return run(conn, "bench_server_version")[0][0]

    def close(self) -> None:
        """Drop every database this bench created."""
        for full in reversed(self.created):
            self._admin("bench_database_drop", name=full)
        self.created.clear()


def median_of(repeats: int, once: Callable[[], float]) -> tuple[float, list[float]]:
    """Call ``once`` ``repeats`` times; return ``(median, all values)``.

    :param once: runs one measurement and returns its figure (seconds or a rate).
    """
    values = [once() for _ in range(max(1, repeats))]
    return statistics.median(values), values


class Stopwatch:
    """``with Stopwatch() as t: …`` then ``t.seconds`` (wall time, ``time.perf_counter``)."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def _busy_jiffies() -> tuple[int, int] | None:
    """Return ``(busy, total)`` CPU jiffies of the whole machine since boot (``/proc/stat``), or
    ``None`` where its ``cpu`` line is missing or has fewer than the four fields of old kernels.

    Busy is user, nice, system, irq and softirq. Not counted: idle and iowait; steal (time the
    hypervisor gave another guest, not this machine's work, though in the total: those cores were
    not ours to use); guest and guest_nice, which Linux already counts in user and nice.
    """
    first = (_read("/proc/stat").splitlines() or [""])[0].split()
    if not first or first[0] != "cpu" or len(first) < 5:
        return None
    try:
        f = [int(v) for v in first[1:]] + [0] * 10
    except ValueError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal


class Sampler:
    """Where a run's time goes: the machine's CPU and what the run's backends wait on.

    ``with Sampler(url) as s: …`` samples ``pg_stat_activity`` of ``url``'s database every
    ``interval`` seconds from its own connection (its own backend excluded) and reads the
    machine's CPU (``/proc/stat``) at both ends. Afterwards ``s.busy`` is the share of all cores
    that were busy (0–1; every process of the machine, the run's clients and this sampler
    included), ``s.cpu_seconds`` the busy core-seconds (both NaN where /proc/stat is missing or
    short: :func:`_busy_jiffies`), and ``s.waits`` the share of backend samples per wait: ``CPU`` (active,
    no wait event), ``Client`` (idle, waiting for the next statement), or ``type:event``
    (``Lock:tuple``, ``IO:WALSync``…; PostgreSQL docs, 28.2.3 Wait Events).
    """

    def __init__(self, url: str, interval: float = 0.01) -> None:
        self.url, self.interval = url, interval
        self.counts: dict[str, int] = {}
        self.busy = self.cpu_seconds = 0.0

    def __enter__(self) -> Sampler:
        import threading

        self._stop = threading.Event()
        self._conn = psycopg.connect(self.url, autocommit=True)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._start = _busy_jiffies()
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            for state, kind, event in run(self._conn, "bench_backend_waits"):
                key = ("CPU" if state == "active" and kind is None
                       else "Client" if state and state.startswith("idle") else f"{kind}:{event}")
                self.counts[key] = self.counts.get(key, 0) + 1

    def __exit__(self, *exc: object) -> None:
        end = _busy_jiffies()
        self._stop.set()
        self._thread.join()
        self._conn.close()
        if end is None or self._start is None:  # no /proc/stat: not measured, never made up
            self.busy = self.cpu_seconds = math.nan
            return
        busy, total = end[0] - self._start[0], end[1] - self._start[1]
        self.busy = busy / total if total else 0.0
        self.cpu_seconds = busy / os.sysconf("SC_CLK_TCK")

    @property
    def waits(self) -> dict[str, float]:
        """Share of backend samples per wait, largest first."""
        n = sum(self.counts.values()) or 1
        return {k: v / n for k, v in sorted(self.counts.items(), key=lambda kv: -kv[1])}

    def line(self, rows: int, top: int = 4) -> str:
        """``cores busy 98%, 410 µs of machine CPU a row; backends: CPU 61%, Client 30%, …``."""
        waits = ", ".join(f"{k} {v:.0%}" for k, v in list(self.waits.items())[:top])
        if math.isnan(self.busy):
            return f"machine CPU not measured (no usable /proc/stat); backends: {waits}"
        return (f"cores busy {self.busy:.0%}, {self.cpu_seconds * 1e6 / max(rows, 1):,.0f} µs of "
                f"machine CPU a row; backends: {waits}")


@dataclass
class Row:
    """One line of the results table.

    :param path: the hot path (``claim ×8``, ``send path``…).
    :param ours: outreach's figure, formatted with its unit.
    :param compared: the baselines' figures, formatted, with the ratios.
    :param target: the target, in words.
    :param met: whether it is met (``None``: reported only).
    :param why: what bounds the row; for a missed target, what would close it.
    """

    path: str
    ours: str
    compared: str
    target: str
    met: bool | None
    why: str = ""


@dataclass
class Report:
    """Everything ``bench/run.py`` writes: the rows, the sizes, notes, and per-bench details."""

    sizes: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def machine(server_version: str) -> list[str]:
    """Describe the machine and software, one ``- key: value`` line each."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in _read("/proc/cpuinfo").splitlines()
                if ln.startswith("model name")), platform.processor() or "unknown")
    mem = next((ln.split()[1] for ln in _read("/proc/meminfo").splitlines()
                if ln.startswith("MemTotal")), "0")
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    return [f"- CPU: {cpu}, {os.cpu_count()} cores; RAM {int(mem) / 1024 / 1024:.1f} GiB",
            f"- OS: {platform.platform()}",
            f"- Python {platform.python_version()}; PostgreSQL {server_version}",
            f"- packages: {', '.join(versions)}"]


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def write_report(report: Report, path: Path, header: list[str]) -> str:
    """Render ``report`` as Markdown, write it to ``path`` and return the text."""
    lines = ["# outreach benchmarks", "", "Written by `make bench` (bench/run.py). Each figure is "
             f"the median of {report.sizes.get('repeats')} runs; every ratio compares figures "
             "measured in the same run on the same server.", "", "## Machine", "", *header, "",
             "## Sizes", "", ", ".join(f"{k}={v}" for k, v in report.sizes.items()), "",
             "## Results", "",
             "| path | ours | compared in the same run with | target | met |",
             "|---|---|---|---|---|"]
    for r in report.rows:
        met = "reported" if r.met is None else ("yes" if r.met else "**no**")
        lines.append(f"| {r.path} | {r.ours} | {r.compared} | {r.target} | {met} |")
    missed = [r for r in report.rows if r.why]
    if missed:
        lines += ["", "## What bounds each row (and what would close a missed target)", ""]
        lines += [f"- **{r.path}**: {r.why}" for r in missed]
    if report.notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in report.notes]]
    if report.details:
        lines += ["", "## Details (every run)", "", *[f"- {d}" for d in report.details]]
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text
