"""Scale-out: emails per second through real Airflow — the scheduler, the api-server and 1 or 2
Celery workers (``outreach.dev.deploy.Deployment``, as ``make airflow EXECUTOR=celery`` runs them)
— against an SMTP sink that answers each command ``delay`` seconds late, like a remote relay
(:class:`bench_send.SinkProcess`, the latency row's sink).

One figure is the wall time from triggering ``outreach_send`` through the REST API to the run's
success, for ``emails`` queued emails split into batches of ``batch`` over
``OUTREACH_SEND_PARALLELISM`` mapped tasks, with the ``outreach_smtp`` pool at ``slots``.
Compared, in the same run, with

* the concurrency limit ``slots ÷ (3 × delay)``: what ``slots`` SMTP sessions could deliver if
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


def _run_once(dep, token: str, server: Server, emails: int) -> float:
    """Recreate the queued database, trigger one send run, return its wall time in seconds.

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
    with db.connect(url) as conn:
        sent, ledger, duplicated = run(conn, "bench_sent_totals")[0].values()
    if state != "success" or (sent, ledger, duplicated) != (emails, emails, 0):
        raise RuntimeError(f"scale-out: run {state}, sent={sent} ledger={ledger} "
                           f"duplicated={duplicated} (expected {emails}); logs in {dep.log_dir}")
    return seconds


def _measure(server: Server, workdir: Path, sink: SinkProcess, *, executor: str, workers: int,
             emails: int, batch: int, slots: int, mailboxes: int, repeats: int,
             redis_url: str) -> tuple[float, list[float]]:
    from outreach.dev.deploy import Deployment, sqlalchemy_url

    tag = f"{executor[:5].lower()}{workers}"
    meta = server.create(f"scaleout_meta_{tag}")
    conns = {f"AIRFLOW_CONN_{c.upper()}": sink.connection_json() for c in smtp_conn_ids(mailboxes)}
    dep = Deployment(home=workdir / f"airflow-{tag}", metadata_url=sqlalchemy_url(meta),
                     outreach_url=server.url("scaleout_run"), executor=executor, workers=workers,
                     broker_url=redis_url, queue=f"outreach-bench-{uuid.uuid4().hex[:8]}",
                     name=f"bench-{uuid.uuid4().hex[:6]}", pool_slots=slots,
                     env_extra={**conns, "OUTREACH_PUBLIC_URL": "https://unsubscribe.bench.example",
                                "OUTREACH_UNSUBSCRIBE_SECRET": "bench-secret-0123456789",
                                "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                                "OUTREACH_PREFLIGHT": "off",
                                "OUTREACH_SCHEDULES": "off", "OUTREACH_BATCH_SIZE": str(batch),
                                "OUTREACH_SEND_PARALLELISM": str(-(-emails // batch)),
                                # as many task slots as pool slots, whatever runs them
                                "AIRFLOW__CORE__PARALLELISM": str(slots + 2),
                                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(-(-(slots + 2) // max(workers, 1))),
                                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"})
    try:
        token = dep.up(("outreach_send",))
        return median_of(repeats, lambda: emails / _run_once(dep, token, server, emails))
    finally:
        dep.stop()
        server.drop(f"scaleout_meta_{tag}")
        server.drop("scaleout_run")


def bench(server: Server, workdir: Path, *, emails: int, batch: int, slots: int, delay: float,
          workers: list[int], mailboxes: int, repeats: int) -> tuple[list[Row], list[str]]:
    """Run the scale-out rows (LocalExecutor, then Celery with each of ``workers``); return the
    rows and one detail line per figure.

    :raises RuntimeError: a run failed or did not send every email exactly once.
    """
    import os

    from outreach.dev.deploy import DEFAULT_REDIS_URL, check_redis
    from outreach.settings import SettingsError

    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    try:
        check_redis(redis_url)
    except SettingsError as exc:
        return [Row("scale-out (Celery)", "not measured", str(exc), "reported", None)], []
    queued_database(server, "scaleout_tpl", workdir, emails, mailboxes)
    limit = slots / (REPLIES_PER_MESSAGE * delay)
    rows: list[Row] = []
    details: list[str] = []
    common = dict(emails=emails, batch=batch, slots=slots, mailboxes=mailboxes, repeats=repeats,
                  redis_url=redis_url)
    with SinkProcess(delay=delay) as sink:
        local, local_all = _measure(server, workdir, sink, executor="LocalExecutor", workers=0, **common)
        details.append(f"scale-out LocalExecutor: {', '.join(f'{r:.1f}' for r in local_all)} emails/s")
        for n in workers:
            rate, rates = _measure(server, workdir, sink, executor="CeleryExecutor", workers=n, **common)
            details.append(f"scale-out Celery ×{n}: {', '.join(f'{r:.1f}' for r in rates)} emails/s")
            rows.append(Row(
                f"scale-out: Celery ×{n} ({int(delay * 1000)} ms a command)",
                f"{rate:.1f} emails/s ({emails} emails, pool {slots}, batches of {batch})",
                f"concurrency limit {slots} ÷ {REPLIES_PER_MESSAGE * delay:.3f} s = {limit:.1f}/s → "
                f"**{rate / limit:.2f}×**; LocalExecutor {local:.1f}/s → **{rate / local:.2f}×**",
                "reported", None,
                f"at the limit the relay's replies would take {emails / limit:.1f} s of the run's "
                f"{emails / rate:.1f} s; the rest, not split by measurement here, is the run's "
                "fixed Airflow costs (preflight, plan and summary tasks, a new task process per "
                "batch, scheduler round trips). The pool's "
                f"{slots} slots bound every executor alike, so a second Celery worker adds no "
                "concurrency. Expected, not measured here: more emails and larger batches per "
                "task move the figure towards the limit"))
    return rows, details
