"""Scale-out: emails per second through real Airflow — the scheduler, the api-server and 1 or 2
Celery workers (``outreach.dev.deploy.Deployment``, as ``make airflow EXECUTOR=celery`` runs them)
— against an SMTP sink that answers each command ``delay`` seconds late, like a remote relay
(:class:`bench_send.SinkProcess`, the latency row's sink).

One figure is the wall time from triggering ``outreach_send`` through the REST API to the run's
success, for ``emails`` queued emails. Pool, batches a run, worker concurrency and parallelism
come from the sizing rule (:mod:`outreach.sizing`: ``mailboxes`` × ``sessions`` SMTP sessions,
each worker ``slots`` send slots), as ``make airflow`` sets them, so the pool follows the workers;
each of the run's batches (one per pool slot) takes ``ceil(emails / batches)`` rows, at least
``batch``: one wave of send tasks, each paying its task start-up once. Compared, in the same run,
with

* the concurrency limit ``pool ÷ (3 × delay)``: what ``pool`` SMTP sessions could deliver if
  nothing but the relay's replies took time (3 delayed replies a message over an open session,
  :data:`bench_latency.REPLIES_PER_MESSAGE`),
* the first Celery row (one worker), and
* the LocalExecutor deployment (``make airflow``) on the same queue.

Targets (issue 29): 2 workers ≥ 1.8× one worker and 4 workers ≥ 3.2×, each ≥ 0.8× its limit.
Each row says what bounds it, from its run's task instances (:func:`breakdown`, earlier tries
included). Needs Redis (``REDIS_URL``, default ``redis://127.0.0.1:6379/0``); without it the row
says so. Deployments start outside the clock.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from bench_latency import REPLIES_PER_MESSAGE
from bench_send import SinkProcess
from common import Row, Server, median_of, run
from data import queued_database, smtp_conn_ids
from outreach import db


def _iso(value: str | None) -> float | None:
    import datetime as dt

    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def _tries(dep, token: str, run_id: str, t: dict) -> list[dict]:
    """The earlier tries of task instance ``t`` (REST API ``…/tries``), oldest first."""
    path = f"/dags/outreach_send/dagRuns/{run_id}/taskInstances/{t['task_id']}"
    if t.get("map_index", -1) >= 0:
        path += f"/{t['map_index']}"
    tries = dep.api("GET", path + "/tries", token).get("task_instances", [])
    return [x for x in tries if x.get("try_number", 0) < t.get("try_number", 0)]


def breakdown(dep, token: str, run_id: str) -> dict[str, Any]:
    """Where one run's wall time went, from its task instances and their earlier tries (REST
    API): ``run`` (the run's start to its end, s), per task (``plan``, the preflight in it;
    ``send_batch``, all of them; ``summary``; ``after_send``) the seconds from the first start to
    the last end, ``send_busy`` (the send tasks' summed durations), ``startup`` (summed seconds from a
    task's queueing to its start: the executor, a worker slot, a new task process), ``waits``
    (the run's seconds when no task of it was running: scheduler round trips between the tasks,
    a retry's delay), ``longest`` (the longest of those waits and what ran after it) and
    ``retried`` (earlier tries of any task: a try that failed, even before it started, waits
    ``retry_delay`` for the next)."""
    run = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)
    tis = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}/taskInstances?limit=1000",
                  token)["task_instances"]
    begin, end = _iso(run.get("start_date")), _iso(run.get("end_date"))
    out: dict[str, Any] = {"run": (end or 0) - (begin or 0), "startup": 0.0, "send_busy": 0.0}
    spans: list[tuple[float, float, str]] = []
    retried: list[str] = []
    for t in tis:
        name = t["task_id"] + (f"[{t['map_index']}]" if t.get("map_index", -1) >= 0 else "")
        if t.get("try_number", 0) > 1:
            for x in _tries(dep, token, run_id, t):
                retried.append(f"{name} try {x['try_number']} {x.get('state')}")
                xs, xe = _iso(x.get("start_date")), _iso(x.get("end_date"))
                if xs is not None and xe is not None:
                    spans.append((xs, xe, f"{name} try {x['try_number']}"))
        s, e, q = _iso(t.get("start_date")), _iso(t.get("end_date")), _iso(t.get("queued_when"))
        if s is None or e is None:
            continue
        spans.append((s, e, name))
        first, last = out.get(t["task_id"] + "_from"), out.get(t["task_id"] + "_to")
        out[t["task_id"] + "_from"] = s if first is None else min(first, s)
        out[t["task_id"] + "_to"] = e if last is None else max(last, e)
        out["startup"] += max(0.0, s - q) if q else 0.0
        if t["task_id"] == "send_batch":
            out["send_busy"] += e - s
    for name in ("plan", "send_batch", "summary", "after_send"):
        if name + "_from" in out:
            out[name] = out.pop(name + "_to") - out.pop(name + "_from")
    busy, cursor, longest = 0.0, begin or 0.0, (0.0, "")
    for s, e, name in sorted(spans):
        if s > cursor and s - cursor > longest[0]:
            longest = (s - cursor, name)
        if e > cursor:
            busy += e - max(s, cursor)
            cursor = e
    out["waits"] = max(0.0, out["run"] - busy)
    out["longest"] = f"{longest[0]:.1f} s before {longest[1] or 'the end'}"
    out["retried"] = ", ".join(retried) or "none"
    return out


def breakdown_line(b: dict[str, Any]) -> str:
    """One line of :func:`breakdown`'s figures."""
    return ", ".join([f"{k} {b[k]:.1f} s" for k in ("run", "plan", "send_batch", "summary",
                                                   "after_send", "send_busy",
                                                   "startup", "waits") if k in b]
                     + [f"longest wait {b['longest']}", f"earlier tries: {b['retried']}"])


def _run_once(dep, token: str, server: Server, emails: int, spent: list[dict[str, Any]]) -> float:
    """Recreate the queued database, trigger one send run, return its wall time in seconds
    (and append where it went, :func:`breakdown`, to ``spent``).

    :raises RuntimeError: the run failed or did not send every email exactly once.
    """
    url = server.create("scaleout_run", template="scaleout_tpl")
    started = time.perf_counter()
    run_id = dep.api("POST", "/dags/outreach_send/dagRuns", token,
                     json={"logical_date": None, "conf": {}})["dag_run_id"]
    deadline = time.monotonic() + 3600
    while True:
        state = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)["state"]
        if state in ("success", "failed"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"scale-out: run {run_id} not finished after an hour")
        time.sleep(0.5)
    seconds = time.perf_counter() - started
    spent.append(breakdown(dep, token, run_id))
    with db.connect(url) as conn:
        sent, ledger, duplicated = run(conn, "bench_sent_totals")[0].values()
    if state != "success" or (sent, ledger, duplicated) != (emails, emails, 0):
        raise RuntimeError(f"scale-out: run {state}, sent={sent} ledger={ledger} "
                           f"duplicated={duplicated} (expected {emails}); logs in {dep.log_dir}")
    return seconds


def batch_rows(emails: int, batch: int, sizing) -> int:
    """Rows one send task claims: every email in the rule's batches a run (one wave of send
    tasks, one per pool slot: :attr:`outreach.sizing.Sizing.send_parallelism`), at least
    ``batch``."""
    return max(batch, -(-emails // sizing.send_parallelism))


def _measure(server: Server, workdir: Path, sink: SinkProcess, *, executor: str, workers: int,
             emails: int, batch: int, sizing, mailboxes: int, repeats: int,
             redis_url: str, spent: list[dict[str, Any]]) -> tuple[float, list[float]]:
    from outreach.dev.deploy import Deployment, sqlalchemy_url

    tag = f"{executor[:5].lower()}{workers}"
    meta = server.create(f"scaleout_meta_{tag}")
    conns = {f"AIRFLOW_CONN_{c.upper()}": sink.connection_json() for c in smtp_conn_ids(mailboxes)}
    dep = Deployment(home=workdir / f"airflow-{tag}", metadata_url=sqlalchemy_url(meta),
                     outreach_url=server.url("scaleout_run"), executor=executor, workers=workers,
                     broker_url=redis_url, queue=f"outreach-bench-{uuid.uuid4().hex[:8]}",
                     name=f"bench-{uuid.uuid4().hex[:6]}", pool_slots=sizing.pool_slots,
                     sizing=sizing,
                     env_extra={**conns, "OUTREACH_PUBLIC_URL": "https://unsubscribe.bench.example",
                                "OUTREACH_UNSUBSCRIBE_SECRET": "bench-secret-0123456789",
                                "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                                "OUTREACH_PREFLIGHT": "off",
                                "OUTREACH_SCHEDULES": "off",
                                # The rule's batches a run (one per pool slot), each large enough
                                # that one wave of send tasks takes every email.
                                "OUTREACH_BATCH_SIZE": str(batch_rows(emails, batch, sizing)),
                                "OUTREACH_SEND_PARALLELISM": str(sizing.send_parallelism),
                                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"})
    # The workers' config check (deploy.config_gate) connects to the outreach database: it
    # exists before they start (each run recreates it from the template).
    server.create("scaleout_run", template="scaleout_tpl")
    try:
        token = dep.up(("outreach_send",))
        return median_of(repeats, lambda: emails / _run_once(dep, token, server, emails, spent))
    finally:
        dep.stop()
        server.drop(f"scaleout_meta_{tag}")
        server.drop("scaleout_run")


def bounds(b: dict[str, Any], emails: int, limit: float, slots: int, per_task: int = 1) -> str:
    """What bounds one run, from its :func:`breakdown`: the send tasks' span against the relay's
    time at the limit, and the run's seconds outside the sends (before the first send task
    starts: plan with the preflight, scheduler round trips, task start-up; after the last ends: the
    summary tasks)."""
    sends = b.get("send_batch", 0.0)
    outside = b["run"] - sends
    # A send task holds per_task slots (one session each) for its duration.
    per_message = b.get("send_busy", 0.0) * per_task / emails if emails else 0.0
    return (f"the run's {b['run']:.1f} s: send tasks {sends:.1f} s (at the limit the relay's "
            f"replies take {emails / limit:.1f} s; a message took {per_message * 1000:.0f} ms of "
            f"a send slot against {slots and 1000 * slots / limit:.0f} ms of replies: the rest is "
            f"the task's start-up, its SMTP sessions' set-up and the CPU each message needs on "
            f"this machine), outside the sends {outside:.1f} s (plan "
            f"with the preflight {b.get('plan', 0):.1f} s, summary tasks "
            f"{max(b.get('summary', 0), b.get('after_send', 0)):.1f} s, waits between tasks "
            f"{b['waits']:.1f} s, longest {b['longest']}; earlier tries: {b['retried']})")


def bench(server: Server, workdir: Path, *, emails: int, batch: int, slots: int, sessions: int,
          delay: float, workers: list[int], mailboxes: int, repeats: int,
          ) -> tuple[list[Row], list[str]]:
    """Run the scale-out rows (LocalExecutor, then Celery with each of ``workers``), each sized
    by the rule (``mailboxes`` × ``sessions`` sessions, ``slots`` send slots a worker); return the
    rows and one detail line per figure.

    Targets (issue 29): 2 workers ≥ 1.8× one worker, 4 workers ≥ 3.2×, each ≥ 0.8× the
    SMTP-session limit of its pool.

    :raises RuntimeError: a run failed or did not send every email exactly once.
    """
    import os

    from outreach.dev.deploy import DEFAULT_REDIS_URL, check_redis
    from outreach.settings import SettingsError
    from outreach.sizing import Sizing

    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        check_redis(redis_url)
    except SettingsError as exc:
        return [Row("scale-out (Celery)", "not measured", str(exc), "reported", None)], []
    queued_database(server, "scaleout_tpl", workdir, emails, mailboxes)
    rows: list[Row] = []
    details: list[str] = []
    common = dict(emails=emails, batch=batch, mailboxes=mailboxes, repeats=repeats,
                  redis_url=redis_url)
    spent: list[dict[str, Any]] = []
    common["spent"] = spent
    with SinkProcess(delay=delay) as sink:
        local_sizing = Sizing(mailboxes, sessions, 1, slots)
        local, local_all = _measure(server, workdir, sink, executor="LocalExecutor", workers=0,
                                    sizing=local_sizing, **common)
        details.append(f"scale-out LocalExecutor ({local_sizing.line()}; batches of "
                       f"{batch_rows(emails, batch, local_sizing)}): "
                       f"{', '.join(f'{r:.1f}' for r in local_all)} emails/s; where the runs' "
                       f"time went: {' | '.join(breakdown_line(b) for b in spent)}")
        spent.clear()
        first: tuple[int, float] | None = None
        for n in workers:
            sizing = Sizing(mailboxes, sessions, n, slots)
            limit = sizing.pool_slots / (REPLIES_PER_MESSAGE * delay)
            rate, rates = _measure(server, workdir, sink, executor="CeleryExecutor", workers=n,
                                   sizing=sizing, **common)
            first = first or (n, rate)
            details.append(f"scale-out Celery ×{n} ({sizing.line()}; batches of "
                           f"{batch_rows(emails, batch, sizing)}): "
                           f"{', '.join(f'{r:.1f}' for r in rates)} emails/s; where the runs' "
                           f"time went: {' | '.join(breakdown_line(b) for b in spent)}")
            median_run = min(spent, key=lambda b: abs(b["run"] - emails / rate))
            spent.clear()
            scale_target = {2: 1.8, 4: 3.2}.get(n // first[0]) if n != first[0] else None
            of_limit = rate / limit
            met = of_limit >= 0.8 and (scale_target is None or rate / first[1] >= scale_target)
            target = "≥ 0.8× the session limit" + (
                f", ≥ {scale_target}× Celery ×{first[0]}" if scale_target else "")
            rows.append(Row(
                f"scale-out: Celery ×{n} ({int(delay * 1000)} ms a command)",
                f"{rate:.1f} emails/s ({emails} emails, pool {sizing.pool_slots}, "
                f"{sizing.send_parallelism} batches of {batch_rows(emails, batch, sizing)})",
                f"concurrency limit {sizing.pool_slots} ÷ {REPLIES_PER_MESSAGE * delay:.3f} s = "
                f"{limit:.1f}/s → **{of_limit:.2f}×**; Celery ×{first[0]} {first[1]:.1f}/s → "
                f"**{rate / first[1]:.2f}×**; LocalExecutor {local:.1f}/s → **{rate / local:.2f}×**",
                target, met,
                f"sized by the rule: {sizing.line()}; bound by "
                f"{bounds(median_run, emails, limit, sizing.pool_slots, sizing.sessions_per_task)}"))
    return rows, details
