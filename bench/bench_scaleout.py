"""Scale-out: emails per second through real Airflow — the scheduler, the api-server and 1 or 2
Celery workers (``outreach.dev.deploy.Deployment``, as ``make airflow EXECUTOR=celery`` runs them)
— against an SMTP sink that answers each command ``delay`` seconds late, like a remote relay
(:class:`bench_send.SinkProcess`, the latency row's sink).

One figure is the wall time from triggering ``outreach_send`` through the REST API to the run's
success, for ``emails`` queued emails split into batches of ``batch`` over
``OUTREACH_SEND_PARALLELISM`` mapped tasks. Pool, worker concurrency and parallelism come from the
sizing rule (:mod:`outreach.sizing`: ``mailboxes`` × ``sessions`` SMTP sessions, each worker
``slots`` send slots), as ``make airflow`` sets them, so the pool follows the workers.
Compared, in the same run, with

* the concurrency limit ``pool ÷ (3 × delay)``: what ``pool`` SMTP sessions could deliver if
  nothing but the relay's replies took time (3 delayed replies a message over an open session,
  :data:`bench_latency.REPLIES_PER_MESSAGE`), and
* the LocalExecutor deployment (``make airflow``) on the same queue.

Needs Redis (``REDIS_URL``, default ``redis://127.0.0.1:6379/0``); without it the row says so.
Deployments start outside the clock. Reported only, no target.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from bench_latency import REPLIES_PER_MESSAGE
from bench_send import SinkProcess
from common import Row, Server, median_of, run
from data import queued_database, smtp_conn_ids
from outreach import db


def _iso(value: str | None) -> float | None:
    import datetime as dt

    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def breakdown(dep, token: str, run_id: str) -> dict[str, float]:
    """Where one run's wall time went, from its task instances (REST API): ``run`` (the run's
    start to its end, s), per task group (``preflight``, ``plan``, ``send_batch``, ``summary``,
    ``flag_unconfirmed``) the seconds from the first start to the last end, ``send_busy`` (the
    send tasks' summed durations), ``startup`` (summed seconds from a task's queueing to its
    start: the executor, a worker slot, a new task process) and ``waits`` (the run's seconds when
    no task of it was running: scheduler round trips between the tasks)."""
    run = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)
    tis = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}/taskInstances?limit=1000",
                  token)["task_instances"]
    begin, end = _iso(run.get("start_date")), _iso(run.get("end_date"))
    out: dict[str, float] = {"run": (end or 0) - (begin or 0), "startup": 0.0, "send_busy": 0.0}
    spans = []
    for t in tis:
        s, e, q = _iso(t.get("start_date")), _iso(t.get("end_date")), _iso(t.get("queued_when"))
        if s is None or e is None:
            continue
        spans.append((s, e))
        first, last = out.get(t["task_id"] + "_from"), out.get(t["task_id"] + "_to")
        out[t["task_id"] + "_from"] = s if first is None else min(first, s)
        out[t["task_id"] + "_to"] = e if last is None else max(last, e)
        out["startup"] += max(0.0, s - q) if q else 0.0
        if t["task_id"] == "send_batch":
            out["send_busy"] += e - s
    for name in ("preflight", "plan", "send_batch", "summary", "flag_unconfirmed"):
        if name + "_from" in out:
            out[name] = out.pop(name + "_to") - out.pop(name + "_from")
    busy, cursor = 0.0, begin or 0.0
    for s, e in sorted(spans):
        if e > cursor:
            busy += e - max(s, cursor)
            cursor = e
    out["waits"] = max(0.0, out["run"] - busy)
    return out


def breakdown_line(b: dict[str, float]) -> str:
    """One line of :func:`breakdown`'s figures."""
    return ", ".join(f"{k} {b[k]:.1f} s" for k in ("run", "preflight", "plan", "send_batch",
                                                  "summary", "flag_unconfirmed", "send_busy",
                                                  "startup", "waits") if k in b)


def _run_once(dep, token: str, server: Server, emails: int, spent: list[str]) -> float:
    """Recreate the queued database, trigger one send run, return its wall time in seconds
    (and append where it went, :func:`breakdown_line`, to ``spent``).

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
    spent.append(breakdown_line(breakdown(dep, token, run_id)))
    with db.connect(url) as conn:
        sent, ledger, duplicated = run(conn, "bench_sent_totals")[0].values()
    if state != "success" or (sent, ledger, duplicated) != (emails, emails, 0):
        raise RuntimeError(f"scale-out: run {state}, sent={sent} ledger={ledger} "
                           f"duplicated={duplicated} (expected {emails}); logs in {dep.log_dir}")
    return seconds


def _measure(server: Server, workdir: Path, sink: SinkProcess, *, executor: str, workers: int,
             emails: int, batch: int, sizing, mailboxes: int, repeats: int,
             redis_url: str, spent: list[str]) -> tuple[float, list[float]]:
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
                                "OUTREACH_SCHEDULES": "off", "OUTREACH_BATCH_SIZE": str(batch),
                                # enough batches to fill the pool (at least the rule's)
                                "OUTREACH_SEND_PARALLELISM": str(max(-(-emails // batch),
                                                                     sizing.send_parallelism)),
                                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"})
    try:
        token = dep.up(("outreach_send",))
        return median_of(repeats, lambda: emails / _run_once(dep, token, server, emails, spent))
    finally:
        dep.stop()
        server.drop(f"scaleout_meta_{tag}")
        server.drop("scaleout_run")


def bench(server: Server, workdir: Path, *, emails: int, batch: int, slots: int, sessions: int,
          delay: float, workers: list[int], mailboxes: int, repeats: int,
          ) -> tuple[list[Row], list[str]]:
    """Run the scale-out rows (LocalExecutor, then Celery with each of ``workers``), each sized
    by the rule (``mailboxes`` × ``sessions`` sessions, ``slots`` send slots a worker); return the
    rows and one detail line per figure.

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
    spent: list[str] = []
    common["spent"] = spent
    with SinkProcess(delay=delay) as sink:
        local_sizing = Sizing(mailboxes, sessions, 1, slots)
        local, local_all = _measure(server, workdir, sink, executor="LocalExecutor", workers=0,
                                    sizing=local_sizing, **common)
        details.append(f"scale-out LocalExecutor ({local_sizing.line()}): "
                       f"{', '.join(f'{r:.1f}' for r in local_all)} emails/s; where the runs' "
                       f"time went: {' | '.join(spent)}")
        spent.clear()
        first = None
        for n in workers:
            sizing = Sizing(mailboxes, sessions, n, slots)
            limit = sizing.pool_slots / (REPLIES_PER_MESSAGE * delay)
            rate, rates = _measure(server, workdir, sink, executor="CeleryExecutor", workers=n,
                                   sizing=sizing, **common)
            first = first or rate
            details.append(f"scale-out Celery ×{n} ({sizing.line()}): "
                           f"{', '.join(f'{r:.1f}' for r in rates)} emails/s; where the runs' "
                           f"time went: {' | '.join(spent)}")
            spent.clear()
            rows.append(Row(
                f"scale-out: Celery ×{n} ({int(delay * 1000)} ms a command)",
                f"{rate:.1f} emails/s ({emails} emails, pool {sizing.pool_slots}, batches of "
                f"{batch})",
                f"concurrency limit {sizing.pool_slots} ÷ {REPLIES_PER_MESSAGE * delay:.3f} s = "
                f"{limit:.1f}/s → **{rate / limit:.2f}×**; Celery ×{workers[0]} {first:.1f}/s → "
                f"**{rate / first:.2f}×**; LocalExecutor {local:.1f}/s → **{rate / local:.2f}×**",
                "reported", None,
                f"sized by the rule: {sizing.line()}; at the limit the relay's replies would take "
                f"{emails / limit:.1f} s of the run's {emails / rate:.1f} s; the rest is the "
                "run's fixed Airflow costs (preflight, plan and summary tasks, a new task process "
                "per batch, scheduler round trips), not split by measurement here"))
    return rows, details
