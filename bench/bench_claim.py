"""The claim path: rows claimed and marked sent per second by 1, 2 and 8 concurrent claimers.

Four systems work through the same number of queued items with the same concurrency on the same
server, each in its own database cloned from a template built once (so every run starts from
the same state):

* **ours**: :func:`outreach.claim.claim` (mailbox lock, quota, the one claim statement) and the
  ``email_mark_sent`` statement (row sent + ledger entry) per row;
* **policy**: ours with every contact policy on (person a day and a week, company a day, an
  hourly cap per recipient provider: ``outreach.claim_emails_v4``; the campaign has a holiday
  country with holidays filled and a blackout date, and most domains a cached MX provider), none
  of them binding (one row per lead, caps above the run, no closed day today), so the row
  measures what deciding the policy costs (issue 25: within 10 % of ours, whose database has no
  calendar and no MX cache);
* **bare** (baseline a): ``UPDATE … FOR UPDATE SKIP LOCKED … RETURNING`` and a guarded per-row
  ``UPDATE`` on a bare job table (``bench/queries.sql``);
* **procrastinate** and **PgQueuer** (baseline b): no-op jobs, one worker per claimer.

Each claimer is its own process with its own connection (two cores: threads would measure the
GIL). Processes start and connect first; the clock starts when all are ready and stops when
the last one has drained the queue. Every claimed id is collected: duplicates are counted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from common import PROCESSES, Row, Sampler, Server, Stopwatch, run
from data import queued_database
from outreach import db

SYSTEMS = ("ours", "policy", "bare", "procrastinate", "pgqueuer")
POLICY: dict[str, Any] = {
    "person_per_day": 1, "person_per_week": 3, "company_per_day": 1_000_000,
    "provider_hourly": {p: 1_000_000 for p in ("google", "microsoft", "yahoo", "apple", "other")}}
"""The caps of the policy system: each on, none reached by a run (one row per lead)."""
_MP = PROCESSES


# --- the claimers (each runs in its own process) --------------------------------------------

_SPLIT = {"claim": 0.0, "mark": 0.0}
"""Wall seconds this claimer process spent in its claims and in its marks (sent to the parent):
where a row's time goes, statement by statement, as the claimer sees it."""


def _timed(part: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    start = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        _SPLIT[part] += time.perf_counter() - start


def _ours(url: str, index: int, batch: int, mailboxes: list[int],
          policy: dict[str, Any] | None = None) -> list[int]:
    from outreach.claim import claim

    conn = db.connect(url, autocommit=True)
    active = mailboxes[index % len(mailboxes):] + mailboxes[:index % len(mailboxes)]
    _ready()
    done: list[int] = []
    while active:
        for m in list(active):
            rows, _ = _timed("claim", claim, conn, m, batch, worker=f"bench-claimer-{index}",
                             **(policy or {}))
            if not rows:
                active.remove(m)
            for r in rows:
                if _timed("mark", db.run, conn, "email_mark_sent", {
                        "email_id": r["id"], "claim_token": r["claim_token"], "now": None,
                        "message_id": f"<{r['idempotency_key']}@bench.example>",
                        "smtp_reply": "250 2.0.0 queued", "subject": None,
                        "content_version": None}):
                    done.append(r["id"])
    conn.close()
    return done


def _bare(url: str, index: int, batch: int, mailboxes: list[int]) -> list[int]:
    conn = psycopg.connect(url, autocommit=True)
    _ready()
    done: list[int] = []
    while True:
        token = uuid.uuid4()
        ids = [r[0] for r in _timed("claim", run, conn, "bench_bare_claim",
                                    {"claim_token": token, "limit": batch})]
        if not ids:
            break
        for i in ids:
            if _timed("mark", run, conn, "bench_bare_mark", {"id": i, "claim_token": token}):
                done.append(i)
    conn.close()
    return done


def _procrastinate_app(url: str, seen: list[int] | None = None):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="bench")
    async def noop(i: int) -> None:
        if seen is not None:
            seen.append(i)

    return app, noop


def _procrastinate(url: str, index: int, batch: int, mailboxes: list[int]) -> list[int]:
    seen: list[int] = []
    app, _ = _procrastinate_app(url, seen)

    async def main() -> None:
        async with app.open_async():
            _ready()
            await app.run_worker_async(queues=["bench"], wait=False, install_signal_handlers=False)

    asyncio.run(main())
    return seen


async def _asyncpg(url: str):
    import asyncpg

    info = psycopg.conninfo.conninfo_to_dict(url)
    return await asyncpg.connect(host=info.get("host"), port=info.get("port"),
                                 user=info.get("user"), password=info.get("password") or None,
                                 database=info.get("dbname"))


def _pgqueuer(url: str, index: int, batch: int, mailboxes: list[int]) -> list[int]:
    from pgqueuer import Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    seen: list[int] = []

    async def main() -> None:
        conn = await _asyncpg(url)
        qm = QueueManager(Queries.from_asyncpg_connection(conn))

        @qm.entrypoint("noop")
        async def noop(job) -> None:
            seen.append(int(job.payload))

        _ready()
        await qm.run(mode=QueueExecutionMode.drain, batch_size=batch,
                     dequeue_timeout=dt.timedelta(seconds=1))
        await conn.close()

    asyncio.run(main())
    return seen


def _policy(url: str, index: int, batch: int, mailboxes: list[int]) -> list[int]:
    return _ours(url, index, batch, mailboxes, POLICY)


_CLAIMERS: dict[str, Callable[..., list[int]]] = {
    "ours": _ours, "policy": _policy, "bare": _bare, "procrastinate": _procrastinate,
    "pgqueuer": _pgqueuer}
_barrier = None


_cpu_at_start = 0.0


def _ready() -> None:
    """Wait until every claimer (and the clock) is ready; note this process's CPU time then."""
    global _cpu_at_start
    _barrier.wait()
    _cpu_at_start = time.process_time()


def _child(system: str, url: str, index: int, batch: int, mailboxes: list[int], barrier,
           out) -> None:
    global _barrier
    _barrier = barrier
    try:
        ids = _CLAIMERS[system](url, index, batch, mailboxes)
        out.put((index, time.perf_counter(), ids, "", time.process_time() - _cpu_at_start,
                 dict(_SPLIT)))
    except BaseException as exc:  # noqa: BLE001 - reported, so the parent fails with the reason, never hangs
        barrier.abort()
        out.put((index, time.perf_counter(), [], f"{type(exc).__name__}: {exc}", 0.0, {}))


# --- templates: one database per system, built once ------------------------------------------

def _build_templates(server: Server, workdir: Path, rows: int, mailboxes: int,
                     systems: tuple[str, ...] = SYSTEMS) -> list[int]:
    url = queued_database(server, "claim_ours", workdir, rows, mailboxes)
    with db.connect(url, autocommit=True) as conn:
        ids = [r["id"] for r in conn.execute("SELECT id FROM outreach.mailboxes ORDER BY id")]
    # The policy system's database: ours, plus the calendar and the MX cache its policy reads.
    with psycopg.connect(server.create("claim_policy", template="claim_ours"),
                         autocommit=True) as conn:
        run(conn, "bench_claim_calendar_and_mx")
    if "bare" in systems:
        url = server.create("claim_bare")
        with psycopg.connect(url, autocommit=True) as conn:
            run(conn, "bench_bare_create")
            run(conn, "bench_bare_fill", {"n": rows})
    if "procrastinate" in systems:
        asyncio.run(_fill_procrastinate(server.create("claim_procrastinate"), rows))
    if "pgqueuer" in systems:
        asyncio.run(_fill_pgqueuer(server.create("claim_pgqueuer"), rows))
    for name in {"ours", "policy", *systems}:
        with psycopg.connect(server.url(f"claim_{name}"), autocommit=True) as conn:
            run(conn, "bench_vacuum_analyze")
    return ids


async def _fill_procrastinate(url: str, rows: int) -> None:
    app, noop = _procrastinate_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, rows, 5000):
            await noop.batch_defer_async(*({"i": i} for i in range(start, min(rows, start + 5000))))


async def _fill_pgqueuer(url: str, rows: int) -> None:
    from pgqueuer import Queries

    conn = await _asyncpg(url)
    q = Queries.from_asyncpg_connection(conn)
    await q.install()
    for start in range(0, rows, 5000):
        chunk = range(start, min(rows, start + 5000))
        await q.enqueue(["noop"] * len(chunk), [str(i).encode() for i in chunk], [0] * len(chunk))
    await conn.close()


# --- one measurement --------------------------------------------------------------------------

def measure(server: Server, system: str, claimers: int, rows: int, batch: int,
            mailboxes: list[int]) -> dict[str, Any]:
    """Clone the system's template, drain it with ``claimers`` processes, check the outcome.

    :returns: ``{"seconds", "rate" (rows/s), "done", "duplicates"}``.
    :raises RuntimeError: a claimer failed, or not every row was processed exactly once.
    """
    url = server.create(f"claim_{system}_run", template=f"claim_{system}")
    barrier, out = _MP.Barrier(claimers + 1), _MP.Queue()
    procs = [_MP.Process(target=_child, args=(system, url, i, batch, mailboxes, barrier, out))
             for i in range(claimers)]
    for p in procs:
        p.start()
    barrier.wait(timeout=300)
    start = time.perf_counter()
    with Sampler(url) as sampler:
        results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    errors = [e for _, _, _, e, _, _ in results if e]
    if errors:
        raise RuntimeError(f"{system} ×{claimers}: {errors[0]}")
    seconds = max(end for _, end, _, _, _, _ in results) - start
    ids = [i for _, _, got, _, _, _ in results for i in got]
    client_us = sum(cpu for *_, cpu, _ in results) * 1e6 / rows
    split = {part: sum(sp.get(part, 0.0) for *_, sp in results) * 1e6 / rows
             for part in ("claim", "mark")}
    duplicates = len(ids) - len(set(ids))
    if system in ("ours", "policy", "bare"):
        with psycopg.connect(url) as conn:
            sent, ledger, duplicated = run(conn, "bench_bare_totals" if system == "bare"
                                           else "bench_sent_totals")[0]
        duplicates += duplicated
        if sent != rows or (system != "bare" and ledger != rows):
            raise RuntimeError(f"{system} ×{claimers}: {sent} sent, {ledger} in the ledger, "
                               f"expected {rows}")
    if len(set(ids)) != rows:
        raise RuntimeError(f"{system} ×{claimers}: {len(set(ids))} distinct rows done of {rows}")
    quota_ms = _quota_ms(url, mailboxes) if system == "ours" else 0.0
    server.drop(f"claim_{system}_run")
    return {"seconds": seconds, "rate": rows / seconds, "done": len(ids), "duplicates": duplicates,
            "quota_ms": quota_ms, "busy": sampler.busy,
            "client_us": client_us, "claim_us": split["claim"], "mark_us": split["mark"],
            "where": (f"{sampler.line(rows)} (the claimers' own processes: {client_us:,.0f} µs a "
                      f"row; their wall time a row, summed over claimers: claiming "
                      f"{split['claim']:,.0f} µs, marking {split['mark']:,.0f} µs)"),
            "cpu_us": sampler.cpu_seconds * 1e6 / rows}


def _quota_ms(url: str, mailboxes: list[int], n: int = 5, warm: int = 10) -> float:
    """Median milliseconds of the claim's quota query (``mailbox_remaining_today``) on a drained
    database, where every row was claimed today: its cost at the end of a run (it reads the
    per-quarter-hour counter, migration 0081, so it no longer grows with the day's claims). The
    median of ``n`` calls after ``warm`` on the same connection, as a claimer that has claimed a
    while asks it: psycopg prepares a statement on its 5th run, and until then PostgreSQL plans
    this one anew each time (2.6–18 ms a call on 2026-12-01, against 0.3–0.4 ms prepared)."""
    values = []
    with db.connect(url, autocommit=True) as conn:
        for i in range(warm + n):
            t = time.perf_counter()
            db.one(conn, "mailbox_remaining_today", {  # as outreach.claim.claim asks it
                "mailbox_id": mailboxes[0], "now": None, "interval": None, "gap_seconds": 0.0,
                "gap_jitter": 0.0, "horizon": dt.timedelta(minutes=15)})
            if i >= warm:
                values.append((time.perf_counter() - t) * 1000)
    return statistics.median(values)


def bench(server: Server, workdir: Path, *, rows: int, concurrency: list[int], batch: int,
          mailboxes: int, repeats: int, systems: tuple[str, ...] = SYSTEMS,
          ) -> tuple[list[Row], list[str]]:
    """Run the claim benchmark; return the result rows and one detail line per measurement.

    :param rows: queued items per run (``CLAIM_ROWS``).
    :param concurrency: claimer counts, e.g. ``[1, 2, 8]``.
    :param batch: rows per claim (ours, bare) and PgQueuer's batch size.
    :param mailboxes: mailboxes the queued rows are spread over (ours claims per mailbox).
    :param systems: the systems to measure (``--claim-systems``; ours always, as every ratio
        compares with it).
    """
    systems = ("ours", *(s for s in systems if s != "ours"))
    with Stopwatch() as setup:
        ids = _build_templates(server, workdir, rows, mailboxes, systems)
    details = [f"claim: templates ({rows} items × {len(systems)} systems) built in "
               f"{setup.seconds:.1f} s"]
    out: list[Row] = []
    for c in concurrency:
        med: dict[str, dict[str, float]] = {}
        # Repeats interleave the systems (ours, policy, …, ours, policy, …), so a drift of the
        # machine's load (two cores, shared) spreads over every system instead of one.
        by_system: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        for _ in range(max(1, repeats)):
            for system in systems:
                by_system[system].append(measure(server, system, c, rows, batch, ids))
        for system in systems:
            runs = by_system[system]
            rates = sorted(r["rate"] for r in runs)
            dup = sum(r["duplicates"] for r in runs)
            med[system] = {"rate": statistics.median(rates), "duplicates": dup,
                           **{k: statistics.median(r[k] for r in runs)
                              for k in ("busy", "cpu_us", "client_us", "claim_us", "mark_us")},
                           "quota_ms": statistics.median(r["quota_ms"] for r in runs)}
            details.append(f"claim ×{c} {system}: " + ", ".join(f"{r:,.0f}" for r in rates)
                           + f" rows/s; duplicates {dup}; " + runs[0]["where"])
        ours = med["ours"]["rate"]
        if "bare" not in med:
            _policy_row(out, med, c)
            continue
        bare = med["bare"]["rate"]
        peers = {s: med[s]["rate"] for s in ("procrastinate", "pgqueuer") if s in med}
        ratio = ours / bare
        met = ratio >= 0.8 and all(ours > v for v in peers.values()) and med["ours"]["duplicates"] == 0
        why = ""
        if not met:
            why = _why_claim(ratio, ours, peers, med["ours"]["quota_ms"], rows // mailboxes, batch,
                             med["ours"], med["bare"])
        compared = (f"(a) bare SKIP LOCKED + per-row mark {bare:,.0f}/s → ours **{ratio:.2f}×**; "
                    + "; ".join(f"(b) {s} {v:,.0f}/s → ours {ours / v:.2f}×"
                                for s, v in peers.items()))
        out.append(Row(f"claim ×{c}", f"{ours:,.0f} rows/s; duplicates "
                       f"{med['ours']['duplicates']:.0f}", compared,
                       "≥ 0.8× (a), ahead of both (b), 0 duplicates", met, why))
        _policy_row(out, med, c)
    return out, details


def _policy_row(out: list[Row], med: dict[str, dict[str, float]], c: int) -> None:
    """Append the policy row of ``c`` claimers, when the policy system ran."""
    if "policy" not in med:
        return
    ours, policy = med["ours"]["rate"], med["policy"]["rate"]
    ratio = policy / ours
    met = ratio >= 0.9 and med["policy"]["duplicates"] == 0
    out.append(Row(
        f"claim with contact policy ×{c}", f"{policy:,.0f} rows/s; duplicates "
        f"{med['policy']['duplicates']:.0f}",
        f"ours without the policy {ours:,.0f}/s → **{ratio:.2f}×**",
        "≥ 0.9× ours (issue 25), 0 duplicates", met,
        "" if met else (
            f"the policy costs {1 - ratio:.0%} of the claim rate: per round the claim takes a "
            "try-advisory-lock per person and per organisation, counts the touches of each picked "
            "person (7 days), the people of each picked organisation (24 hours, which grows with "
            "the organisation's contacts that day) and the mailbox's rows of the last hour per "
            "recipient provider (which grows with the mailbox's hourly rate)")))


def _cpu_split(ours: dict[str, float], bare: dict[str, float]) -> str:
    """How the machine's CPU explains the ratio: busy cores, CPU per row, client and server."""
    def split(m: dict[str, float]) -> str:
        return (f"{m['cpu_us']:,.0f} µs of machine CPU a claimed row ({m['client_us']:,.0f} µs in "
                f"its claimer processes, the rest PostgreSQL's), cores {m['busy']:.0%} busy")
    if any(math.isnan(m[k]) for m in (ours, bare) for k in ("busy", "cpu_us")):
        return "Machine CPU not measured in this run (no usable /proc/stat). Where the CPU goes"
    text = f"Measured in this run: ours {split(ours)}; bare {split(bare)}"
    if ours["busy"] >= 0.9:
        text += (". Ours has used every core, so more claimers cannot go faster: its rate is the "
                 "cores over its CPU a row, and where bare is CPU-bound too the ratio is their CPU "
                 f"ratio ({bare['cpu_us']:,.0f} / {ours['cpu_us']:,.0f} = "
                 f"{bare['cpu_us'] / ours['cpu_us']:.2f}); bare still has idle CPU wherever it "
                 "waits on the WAL flush of its commits, and fills it with more claimers")
    elif "rate" in ours and "rate" in bare:
        wall_o, wall_b = 1e6 / ours["rate"], 1e6 / bare["rate"]
        if abs(ours["cpu_us"] - wall_o) <= 0.2 * wall_o:  # its CPU a row ≈ its time a row
            text += (f". Wall time a row: ours {wall_o:,.0f} µs, about its machine CPU a row "
                     "(its claimers and their backends take turns, about "
                     f"{ours['cpu_us'] / wall_o:.1f} core(s) busy at a time), so its rate is "
                     f"bound by that CPU; bare {wall_b:,.0f} µs with {bare['cpu_us']:,.0f} µs "
                     f"of machine CPU ({bare['cpu_us'] / wall_b:.1f} core(s) busy at a time): it "
                     "waits more (its backends' waits: the detail lines)")
    if "claim_us" in ours and "claim_us" in bare:
        text += (". The claimers' wall time a row, statement by statement (summed over claimers, "
                 f"so waits for a core count too): ours claiming {ours['claim_us']:,.0f} µs and "
                 f"marking {ours['mark_us']:,.0f} µs, bare {bare['claim_us']:,.0f} µs and "
                 f"{bare['mark_us']:,.0f} µs")
    return text + ". Where that CPU goes"


def _why_claim(ratio: float, ours: float, peers: dict[str, float], quota_ms: float,
               per_mailbox: int, batch: int, ours_m: dict[str, float],
               bare_m: dict[str, float]) -> str:
    parts = []
    if ratio < 0.8:
        parts.append(
            f"ours is {ratio:.2f}× the bare statements. {_cpu_split(ours_m, bare_m)}: per claim, "
            "ours locks the mailbox row and "
            "reads what it claimed today (the daily cap and run share, `mailbox_remaining_today`) "
            "from `outreach.mailbox_claim_counts`, which triggers on `outreach.emails` keep per "
            "quarter-hour (migration 0081; until then it counted the day's rows): measured at the "
            f"end of this run, after a mailbox claimed {per_mailbox:,} rows today, that query "
            f"takes {quota_ms:.2f} ms prepared, {quota_ms * 1000 / batch:.0f} µs per claimed row "
            f"at batches of {batch}, no longer growing with the day; in exchange the claim's "
            "update fires the counter trigger once per claimed row (28 µs a row: 2,000 rows claimed "
            "50 at a time with the trigger enabled and disabled, twice, 2026-12-01: 146–149 against "
            "121–123 µs a claimed row). The claim's pick in "
            "`outreach.claim_emails_v1` walks `outreach_emails_queued_idx` in order and stops at "
            "the limit (migration 0085; before it, hash joins and a sort over every queued row of "
            "the mailbox under the mailbox lock: 13 ms a claim at 2,500 queued rows, growing "
            "with the queue; 2.3 ms after, EXPLAIN ANALYZE). Per row, the mark also "
            "writes the ledger row "
            "(`send_log`: four index entries, two unique, and two foreign-key checks, a quarter of "
            "the mark's execution time in EXPLAIN ANALYZE) in the same statement, and the email "
            "row's update cannot stay HOT because `status` is in partial-index predicates, so each "
            "of its indexes (primary key, (lead, step), idempotency key, (mailbox, claimed_at)) "
            "gets a new entry; the bare mark writes one. Not done: making the mark HOT, which "
            "needs queue and reaper indexes that do not name `status` at all (the claim's queue "
            "index cannot: PostgreSQL 16 keeps an update HOT only when no btree index reads a "
            "changed column); and dropping the ledger's mailbox column, its foreign key and its "
            "(mailbox, accepted_at) index, which the reports read (an A/B at ×8 dropping the "
            "foreign key and the index, twice, was within noise: 0.39-0.45× either way)")
    behind = [s for s, v in peers.items() if ours <= v]
    if "pgqueuer" in behind:
        parts.append("behind PgQueuer: it completes jobs in buffered batches (its "
                     "JobStatusLogBuffer writes up to batch_size outcomes in one statement), while "
                     "outreach commits each row's outcome right after its own handoff, by design: a "
                     "batched mark lost in a crash would leave delivered rows to be resent or "
                     "reaped. Closing the gap without breaking that would need a cheaper per-row "
                     "statement, not batching")
    if "procrastinate" in behind:
        parts.append("behind procrastinate: see the per-run figures below")
    return "; ".join(parts)
