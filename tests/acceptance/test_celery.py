"""The CeleryExecutor deployment as processes (``make airflow EXECUTOR=celery WORKERS=2``): real
Celery workers on the local Redis, metadata and outreach data on the local PostgreSQL, the real
scheduler and api-server. Select with ``-m celery``.

* A 2,000-lead campaign over 4 mailboxes goes out once, sent by both workers, never more SMTP
  sessions at once than the ``outreach_smtp`` pool has slots.
* A worker SIGKILLed in the middle of a send run: nothing twice, the other worker carries on, and
  every row the killed worker held ends sent, back in the queue or unconfirmed — never stuck.
* Send tasks cleared through the REST API (a finished one and a running one) while the other
  worker runs the same DAG run: nothing twice.
* A worker SIGKILLed and PostgreSQL restarted during a run (the deployment supervised as ``make
  airflow`` supervises it): everything stays up, the dead worker comes back, every lead gets its
  email exactly once at the sink, and the dead worker's rows never handed over are sent within
  minutes (the reaper's short release), not after the 30-minute rule.

Each module run has its own databases (unique names, dropped afterwards) and its own Celery
queue and worker names, so parallel runs on one machine do not collide. Waits are generous (a
shared 2-core machine schedules slowly); nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import psutil
import psycopg
import pytest
from aiosmtpd.handlers import Mailbox
from aiosmtpd.smtp import SMTP

from outreach.dev import embedded
from outreach.dev.deploy import Deployment, check_redis, sqlalchemy_url
from outreach.dev.devsmtp import LoopbackSMTPServer, read_maildir
from outreach.leads import import_leads
from outreach.migrate import upgrade
from outreach.queue import queue_due, reap
from outreach.resolve import resolve
from support import invariants
from support.deployment import accepted_once, send_tis, trigger, wait_for, wait_run
from support.flow import rows, scalar

# One xdist group for the whole module (conftest names groups by path): a test here restarts
# the machine's PostgreSQL, which every other test of this module uses; on another worker at
# that moment, a Celery deployment's setup met "connection refused".
pytestmark = [pytest.mark.airflow, pytest.mark.celery,
              pytest.mark.xdist_group("acceptance/test_celery.py")]

ADMIN_URL = os.environ.get("OUTREACH_CELERY_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
MAILBOXES = 4
POOL_SLOTS = 3  # below the workers' 2 × 2 task slots, so the pool is what bounds the sessions
DAGS = ("outreach_send",)
LONG = 1500  # seconds: a shared, loaded machine schedules slowly


class _DelayedMailbox(Mailbox):
    """A Maildir handler that answers the end of DATA ``delay`` seconds late (a remote relay)."""

    delay = 0.0

    async def handle_DATA(self, server, session, envelope):
        if self.delay:
            await asyncio.sleep(self.delay)
        return await super().handle_DATA(server, session, envelope)


class CountingSink(LoopbackSMTPServer):
    """A loopback SMTP server into a Maildir that counts concurrent sessions (``peak``) and can
    answer late (``delay``)."""

    def __init__(self, maildir: Path) -> None:
        self.maildir = maildir
        maildir.parent.mkdir(parents=True, exist_ok=True)
        self.handler = _DelayedMailbox(maildir)
        super().__init__(self.handler)
        self.open = self.peak = 0
        self._lock = threading.Lock()
        ctrl, sink = self._controller, self

        class _Counting(SMTP):
            def connection_made(self, transport):
                with sink._lock:
                    sink.open += 1
                    sink.peak = max(sink.peak, sink.open)
                super().connection_made(transport)

            def connection_lost(self, error):
                with sink._lock:
                    sink.open -= 1
                super().connection_lost(error)

        ctrl.factory = lambda: _Counting(ctrl.handler, **ctrl.SMTP_kwargs)

    def messages(self):
        return read_maildir(self.maildir)

    def reset(self, delay: float) -> None:
        for sub in ("new", "cur", "tmp"):
            for f in (self.maildir / sub).glob("*"):
                f.unlink()
        self.handler.delay = delay
        with self._lock:
            self.peak = self.open


def _admin(sql: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(sql)


@pytest.fixture(scope="module")
def celery(tmp_path_factory):
    """A running CeleryExecutor deployment with two workers; yields ``(dep, token, sink, url)``."""
    try:
        _admin("SELECT 1")
        check_redis(REDIS_URL)
    except Exception as exc:  # noqa: BLE001 - any failure fails the test with this message
        pytest.fail(f"the Celery tests need PostgreSQL at {ADMIN_URL} and Redis at {REDIS_URL} "
                    f"(OUTREACH_CELERY_ADMIN_URL, REDIS_URL): {exc}")
    tmp = tmp_path_factory.mktemp("celery")
    run = uuid.uuid4().hex[:8]
    meta, tpl, data = f"airflow_c_{run}", f"outreach_ctpl_{run}", f"outreach_c_{run}"
    _admin(f'CREATE DATABASE "{meta}"')
    _admin(f'CREATE DATABASE "{tpl}"')
    upgrade(embedded.with_database(ADMIN_URL, tpl))
    _admin(f'CREATE DATABASE "{data}" TEMPLATE "{tpl}"')
    url = embedded.with_database(ADMIN_URL, data)
    sink = CountingSink(tmp / "maildir").start()
    conn = sink.connection_json(timeout=10)
    dep = Deployment(
        home=tmp / "airflow", metadata_url=sqlalchemy_url(embedded.with_database(ADMIN_URL, meta)),
        outreach_url=url, executor="CeleryExecutor", workers=2, broker_url=REDIS_URL,
        queue=f"outreach-test-{run}", name=f"t{run}", pool_slots=POOL_SLOTS,
        env_extra={**{f"AIRFLOW_CONN_OUTREACH_SMTP_M{i}": conn for i in range(1, MAILBOXES + 1)},
                   "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                   "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                   "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                   "OUTREACH_SCHEDULES": "off",
                   "OUTREACH_PREFLIGHT": "off", "OUTREACH_SMTP_TIMEOUT": "10",
                   # 2,000 leads in one run of 20 batches; 600 leads in 6 (two waves of the pool).
                   "OUTREACH_BATCH_SIZE": "100", "OUTREACH_SEND_PARALLELISM": "20",
                   "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2", "AIRFLOW__CORE__PARALLELISM": "8",
                   "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
                   "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                   # A SIGKILLed worker's task is failed (and retried) after a minute without a
                   # heartbeat instead of five.
                   "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
                   "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5"})
    try:
        token = dep.up(DAGS, timeout=LONG)
        dep.supervise()  # as `make airflow` does: a component that exits is started again
        yield dep, token, sink, url, tpl
    finally:
        dep.stop()
        sink.stop()
        time.sleep(1)
        left = [p for p in psutil.process_iter(["pid", "cmdline", "environ"])
                if p.info["environ"] and p.info["environ"].get("AIRFLOW_HOME") == str(dep.home)]
        for name in (meta, tpl, data):
            _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        assert not left, f"processes left behind: {[p.info['cmdline'] for p in left]}"


@pytest.fixture
def fresh(celery):
    """The deployment with an empty outreach database (same name, recreated) and an empty sink."""
    dep, token, sink, url, tpl = celery
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{tpl}"')
    sink.reset(delay=0.0)
    return dep, token, sink, url


def campaign(url: str, tmp_path: Path, leads: int) -> None:
    """Import ``leads`` leads into a one-step campaign over :data:`MAILBOXES` mailboxes (each
    with its own SMTP connection, all at the sink) and queue them."""
    addresses = [f"m{i}@mail.outreach-celery.example" for i in range(1, MAILBOXES + 1)]
    (tmp_path / "mailboxes.yaml").write_text("mailboxes:\n" + "".join(
        f"  - address: {a}\n    name: Mailbox {i}\n    smtp_conn_id: outreach_smtp_m{i}\n"
        f"    timezone: UTC\n    daily_cap: 5000\n" for i, a in enumerate(addresses, 1)))
    (tmp_path / "campaign.yaml").write_text(
        "key: celery-test\nname: Celery test\nstatus: active\ntimezone: UTC\n"
        "send_window:\n  days: [mon, tue, wed, thu, fri, sat, sun]\n  start: \"00:00\"\n  end: \"24:00\"\n"
        "mailboxes:\n" + "".join(f"  - {a}\n" for a in addresses)
        + "steps:\n  - template: ops_intro\n    subject: \"Hello {{ lead.company }}\"\n    delay_days: 0\n")
    (tmp_path / "leads.csv").write_text("Email,First Name,Last Name,Company Name\n" + "".join(
        f"lead{i:05d}@acme{i % 13}.example,Lee{i},Test,Acme {i % 13}\n" for i in range(leads)))
    result = import_leads(url, tmp_path / "campaign.yaml", tmp_path / "mailboxes.yaml",
                          tmp_path / "leads.csv")
    assert result.imported == leads, result.summary()
    assert queue_due(url)["queued"] == leads


def send_until_empty(dep, token, url, runs: int = 4) -> None:
    for _ in range(runs):
        if not scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'"):
            return
        run_id = trigger(dep, token, "outreach_send")
        assert wait_run(dep, token, "outreach_send", run_id, LONG)["state"] == "success"
    assert not scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'")


def reap_everything_left(url: str) -> None:
    """Run the reaper as if its threshold had passed (what the next send run's plan does then)."""
    reap(url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31))


def test_two_workers_send_a_2000_lead_campaign_once(fresh, tmp_path):
    dep, token, sink, url = fresh
    campaign(url, tmp_path, 2000)
    run_id = trigger(dep, token, "outreach_send")
    assert wait_run(dep, token, "outreach_send", run_id, LONG)["state"] == "success"
    send_until_empty(dep, token, url)

    messages = sink.messages()
    totals = invariants.assert_ok(url, messages)
    assert totals.sent_rows == len(messages) == 2000
    per_mailbox = rows(url, "SELECT mailbox_id, count(*) AS n FROM outreach.send_log GROUP BY 1")
    assert sorted(r["n"] for r in per_mailbox) == [500] * MAILBOXES
    hosts = {t["hostname"] for t in send_tis(dep, token, run_id) if t["state"] == "success"}
    assert hosts == {dep.worker_name(1), dep.worker_name(2)}, hosts
    assert sink.peak <= POOL_SLOTS, f"{sink.peak} SMTP sessions at once with a pool of {POOL_SLOTS}"


def test_a_worker_killed_mid_send_loses_and_repeats_nothing(fresh, tmp_path):
    dep, token, sink, url = fresh
    campaign(url, tmp_path, 600)
    sink.reset(delay=0.3)  # a batch of 100 takes ≥ 30 s: the kill lands mid-batch
    run_id = trigger(dep, token, "outreach_send")
    victim = dep.worker_name(1)

    def sending_on_victim():
        running = [t for t in send_tis(dep, token, run_id)
                   if t["state"] == "running" and t["hostname"] == victim]
        held = [r["id"] for t in running for r in rows(
            url, "SELECT id FROM outreach.emails WHERE status = 'sending' AND claimed_by LIKE %s",
            (f"%/send_batch[{t['map_index']}]#try{t['try_number']}",))]
        return (held, running) if held and len(sink.messages()) > 0 else None

    held, killed = wait_for(sending_on_victim, LONG, f"a send task of {victim} in the middle of its batch")
    sent_before = len(sink.messages())
    dep.kill_worker(1)

    # The survivor finishes the run: the killed tries are failed after their heartbeat timeout
    # and retried on worker 2, which claims fresh rows, never the killed worker's.
    run = wait_run(dep, token, "outreach_send", run_id, LONG)
    final = {t["map_index"]: t for t in send_tis(dep, token, run_id)}
    for t in killed:  # retried on the survivor, or on the killed worker started again
        again = final[t["map_index"]]
        assert again["try_number"] > t["try_number"], again
        assert again["hostname"] in (dep.worker_name(1), dep.worker_name(2)), again
    assert {t["state"] for t in final.values()} == {"success"}
    assert run["state"] == "success"
    assert len(sink.messages()) > sent_before
    accepted_once(sink.messages())

    # What the killed worker held: the reaper (the next plan, 30 minutes on) decides; then the
    # surviving worker sends what went back to the queue.
    reap_everything_left(url)
    send_until_empty(dep, token, url)
    states = rows(url, "SELECT id, status::text AS status, failure_kind FROM outreach.emails "
                       "WHERE id = ANY(%s)", (held,))
    assert {(r["status"], r["failure_kind"]) for r in states} <= {
        ("sent", None), ("queued", None), ("failed", "unconfirmed")}, states
    totals = invariants.assert_ok(url, sink.messages())
    assert totals.by_status.get("sending", 0) == 0
    assert totals.sent_rows + totals.unconfirmed >= 600 - len(held)


def test_send_tasks_cleared_through_the_api_while_the_other_worker_runs(fresh, tmp_path):
    dep, token, sink, url = fresh
    campaign(url, tmp_path, 600)
    sink.reset(delay=0.2)
    run_id = trigger(dep, token, "outreach_send")

    def one_done_one_running():
        tis = send_tis(dep, token, run_id)
        done = [t for t in tis if t["state"] == "success"]
        running = [t for t in tis if t["state"] == "running"]
        return (done[0], running[0]) if done and running else None

    done, running = wait_for(one_done_one_running, LONG, "a finished and a running send task")
    dep.api("POST", "/dags/outreach_send/clearTaskInstances", token, json={
        "dag_run_id": run_id, "task_ids": [["send_batch", done["map_index"]],
                                           ["send_batch", running["map_index"]]],
        "only_failed": False, "dry_run": False, "reset_dag_runs": True, "include_downstream": True})

    def rerun_finished():
        now = {t["map_index"]: t for t in send_tis(dep, token, run_id)}
        if not all(now[t["map_index"]]["try_number"] > t["try_number"] for t in (done, running)):
            return None
        r = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)
        return r if r["state"] in ("success", "failed") else None

    assert wait_for(rerun_finished, LONG, "the cleared send tasks to run again")["state"] == "success"
    accepted_once(sink.messages())
    reap_everything_left(url)  # a row the interrupted try had handed off, if any
    send_until_empty(dep, token, url)
    messages = sink.messages()
    totals = invariants.assert_ok(url, messages)
    assert totals.by_status.get("sending", 0) == 0
    # An unconfirmed row is one whose handoff was cut off: its message may or may not have
    # reached the server (rule 5), so it counts on the upper side only.
    assert totals.sent_rows <= len(messages) <= totals.sent_rows + totals.unconfirmed
    assert totals.sent_rows + totals.unconfirmed + totals.by_status.get("queued", 0) >= 600


PG_RESTART = os.environ.get("OUTREACH_CELERY_PG_RESTART", "pg_ctlcluster 15 main restart")


@pytest.mark.timeout(2700)  # a deployment, a kill, a restart and the release: on a busy machine
def test_a_killed_worker_and_a_database_restart_leave_the_deployment_up(fresh, tmp_path):
    dep, token, sink, url = fresh
    campaign(url, tmp_path, 600)
    sink.reset(delay=0.3)  # a batch of 100 takes ≥ 30 s: the kill lands mid-batch
    run_id = trigger(dep, token, "outreach_send")
    victim = dep.worker_name(1)

    def victim_mid_batch():
        tis = [t for t in send_tis(dep, token, run_id)
               if t["state"] == "running" and t["hostname"] == victim]
        held = [r["id"] for t in tis for r in rows(
            url, "SELECT id FROM outreach.emails WHERE status = 'sending' AND claimed_by LIKE %s "
                 "AND handed_over_at IS NULL",
            (f"%/send_batch[{t['map_index']}]#try{t['try_number']}",))]
        return held if held and len(sink.messages()) > 0 else None

    held = wait_for(victim_mid_batch, LONG, f"a send task of {victim} in the middle of its batch")
    dead = dep.procs["worker-1"]
    dep.kill_worker(1)
    killed_at = scalar(url, "SELECT now()")
    # What the dead worker still held unstamped: what the short release is for.
    unstamped = [r["id"] for r in rows(
        url, "SELECT id FROM outreach.emails WHERE id = ANY(%s) AND status = 'sending' "
             "AND handed_over_at IS NULL", (held,))]
    stamped_before = {r["id"] for r in rows(
        url, "SELECT id FROM outreach.emails WHERE status = 'sending' AND handed_over_at IS NOT NULL")}
    restarted = subprocess.run(PG_RESTART.split(), capture_output=True, text=True, timeout=120)
    assert restarted.returncode == 0, restarted.stderr

    # The deployment stays up: the dead worker comes back, every component runs.
    wait_for(lambda: dep.procs["worker-1"] is not dead and dep.procs["worker-1"].poll() is None,
             300, f"{victim} to be started again")
    # Every lead is sent by runs of the same deployment, the dead worker's unstamped rows by a
    # run whose plan released them (no reaper call from the test: the deployment's own rule).
    deadline = time.monotonic() + 900
    while scalar(url, "SELECT count(*) FROM outreach.emails WHERE status IN ('queued', 'sending') "
                      "AND (status = 'queued' OR handed_over_at IS NULL)"):
        assert time.monotonic() < deadline, rows(
            url, "SELECT status::text, count(*) FROM outreach.emails GROUP BY 1")
        try:
            if dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)["state"] in (
                    "success", "failed"):
                run_id = trigger(dep, token, "outreach_send")
        except Exception:  # noqa: BLE001 - the api-server may be reconnecting to PostgreSQL
            pass
        time.sleep(10)
    wait_run(dep, token, "outreach_send", run_id, LONG)
    assert all(p.poll() is None for p in dep.procs.values()), {
        k: p.poll() for k, p in dep.procs.items()}
    assert dep.api("GET", "/monitor/health", token)["metadatabase"]["status"] == "healthy"

    # The dead worker's unstamped rows: sent, within minutes of the kill (not 30).
    assert unstamped
    sent = rows(url, "SELECT e.id, e.status::text AS status, l.accepted_at FROM outreach.emails e "
                     "LEFT JOIN outreach.send_log l ON l.email_id = e.id WHERE e.id = ANY(%s)",
                (unstamped,))
    assert {r["status"] for r in sent} == {"sent"}, sent
    late = max(r["accepted_at"] for r in sent) - killed_at
    assert late < dt.timedelta(minutes=10), f"the dead worker's unstamped rows took {late}"

    # Rows handed over when the worker died (or cut off by the restart) are unconfirmed: a
    # person checks the server (here: the sink) and resolves them; then every lead got its
    # email exactly once.
    messages = sink.messages()
    accepted_once(messages)
    reap_everything_left(url)
    unconfirmed = rows(url, "SELECT e.id, e.idempotency_key::text AS k FROM outreach.emails e "
                            "WHERE e.status = 'failed' AND e.failure_kind = 'unconfirmed'")
    assert {r["id"] for r in unconfirmed} <= stamped_before | {
        r["id"] for r in rows(url, "SELECT id FROM outreach.emails WHERE handed_over_at IS NOT NULL")}
    at_sink = {m["Message-ID"].strip("<>").split("@")[0] for m in messages}
    was_sent = [r["id"] for r in unconfirmed if r["k"] in at_sink]
    if was_sent:
        resolve(url, "was_sent", "test (found at the sink)", ids=was_sent)
    not_sent = [r["id"] for r in unconfirmed if r["k"] not in at_sink]
    if not_sent:
        resolve(url, "not_sent", "test (not at the sink)", ids=not_sent)
        send_until_empty(dep, token, url)
    messages = sink.messages()
    totals = invariants.assert_ok(url, messages)
    assert len(messages) == 600 and totals.by_status.get("sent", 0) == 600, totals
    recipients = [m["To"] for m in messages]
    assert len(set(recipients)) == 600

