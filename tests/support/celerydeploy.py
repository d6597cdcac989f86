"""The CeleryExecutor deployment of the Celery acceptance tests (``tests/acceptance/test_celery.py``):
two real Celery workers on the local Redis, the real scheduler and api-server, an SMTP sink that
counts concurrent sessions, and the campaign and send helpers those tests share.

Each deployment has its own databases (unique names, dropped afterwards), Celery queue and worker
names, so that two runs of the suite on one machine (one Redis) never collide."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import threading
import time
import uuid
from pathlib import Path

import psutil
import psycopg
import pytest
from aiosmtpd.handlers import Mailbox
from aiosmtpd.smtp import SMTP

from outreach.airflow.defaults import SMTP_POOL
from outreach.dev import embedded
from outreach.dev.deploy import Deployment, check_redis, sqlalchemy_url
from outreach.dev.devsmtp import LoopbackSMTPServer, empty_maildir, read_maildir
from outreach.leads import import_leads
from outreach.migrate import upgrade
from outreach.queue import queue_due, reap
from support.deployment import (
    ADMIN_PASSWORD,
    DAG_FILES_PARSED_ONCE,
    admin_execute,
    only_dags,
    restore_metadata,
    send_tis,
    trigger,
    wait_run,
)
from support.embeddedpg import clone_database
from support.flow import rows, scalar

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
MAILBOXES = 4
POOL_SLOTS = 4  # 2 send tasks of 2 sessions (SESSIONS_PER_TASK) at once, below the 8 sessions
# the workers' 2 × 2 task slots could run: the pool is what bounds the sessions
SESSIONS_PER_TASK = 2  # several sessions a task, and two tasks at once: one on each worker
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

    def answer_at_once(self) -> None:
        """From now on answer without delay (what was received stays)."""
        self.handler.delay = 0.0

    def reset(self, delay: float) -> None:
        empty_maildir(self.maildir)
        self.handler.delay = delay
        with self._lock:
            self.peak = self.open


@contextlib.contextmanager
def celery_deployment(admin_url: str, tmp: Path, metadata: Path):
    """Run a CeleryExecutor deployment with two workers, its metadata and outreach databases on
    the server of ``admin_url`` (the metadata restored from ``metadata``, a
    :func:`support.deployment.metadata_dump`, its SMTP pool resized through the REST API),
    supervised as ``make airflow`` supervises it (a component that exits is started again);
    yield ``(dep, token, sink, url, template)``. After: stop it, drop its databases and check
    that no process is left behind."""
    try:
        admin_execute(admin_url, "SELECT 1")
        check_redis(REDIS_URL)
    except Exception as exc:  # noqa: BLE001 - any failure fails the test with this message
        pytest.fail(f"the Celery tests need PostgreSQL at {admin_url} and Redis at {REDIS_URL} "
                    f"(REDIS_URL): {exc}")
    run = uuid.uuid4().hex[:8]
    meta, tpl, data = f"airflow_c_{run}", f"outreach_ctpl_{run}", f"outreach_c_{run}"
    admin_execute(admin_url, f'CREATE DATABASE "{meta}"')
    restore_metadata(metadata, embedded.with_database(admin_url, meta))
    admin_execute(admin_url, f'CREATE DATABASE "{tpl}"')
    upgrade(embedded.with_database(admin_url, tpl))
    clone_database(admin_url, data, tpl)
    url = embedded.with_database(admin_url, data)
    sink = CountingSink(tmp / "maildir").start()
    conn = sink.connection_json(timeout=10)
    dep = Deployment(
        home=tmp / "airflow", metadata_url=sqlalchemy_url(embedded.with_database(admin_url, meta)),
        outreach_url=url, executor="CeleryExecutor", workers=2, broker_url=REDIS_URL,
        queue=f"outreach-test-{run}", name=f"t{run}", pool_slots=POOL_SLOTS,
        env_extra={**{f"AIRFLOW_CONN_OUTREACH_SMTP_M{i}": conn for i in range(1, MAILBOXES + 1)},
                   "OUTREACH_ADMIN_PASSWORD": ADMIN_PASSWORD,  # the restored admin's
                   "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                   "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                   "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                   "OUTREACH_SCHEDULES": "off",
                   "OUTREACH_PREFLIGHT": "off", "OUTREACH_SMTP_TIMEOUT": "10",
                   # A dead worker's rows never handed over are requeued after 30 s without its
                   # claim's heartbeat instead of 120 s (the least OUTREACH_RELEASE_SECONDS takes).
                   "OUTREACH_RELEASE_SECONDS": "30",
                   # 2,000 leads in one run of 20 batches (10 tasks); 600 leads in 6 (3 tasks, two waves).
                   "OUTREACH_BATCH_SIZE": "100", "OUTREACH_SEND_PARALLELISM": "20",
                   "OUTREACH_SEND_SESSIONS_PER_TASK": str(SESSIONS_PER_TASK),
                   "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2", "AIRFLOW__CORE__PARALLELISM": "8",
                   "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
                   "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                   # A SIGKILLed worker's task is failed (and retried) after a minute without a
                   # heartbeat instead of five.
                   "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
                   "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                   # A scheduler started again after the database restart adopts the dead
                   # scheduler's running tasks (and so fails the killed worker's) within ~20 s
                   # instead of Airflow's 300 s (seen: 5 min of the restart test's 6.5 waiting).
                   "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "20",
                   **DAG_FILES_PARSED_ONCE, **only_dags(tmp / "dags", "outreach_send")})
    try:
        token = dep.up(("outreach_send",), timeout=LONG, migrate=False)
        # Airflow validates the whole pool (name, slots, include_deferred); the mask applies slots.
        pool = dep.api("PATCH", f"/pools/{SMTP_POOL}", token, params={"update_mask": "slots"},
                       json={"pool": SMTP_POOL, "slots": POOL_SLOTS, "include_deferred": False})
        assert pool["slots"] == POOL_SLOTS, pool
        dep.supervise()
        yield dep, token, sink, url, tpl
    finally:
        dep.stop()
        sink.stop()
        time.sleep(1)
        left = [p for p in psutil.process_iter(["pid", "cmdline", "environ"])
                if p.info["environ"] and p.info["environ"].get("AIRFLOW_HOME") == str(dep.home)]
        for name in (meta, tpl, data):
            admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        assert not left, f"processes left behind: {[p.info['cmdline'] for p in left]}"


def fresh_state(admin_url: str, celery) -> tuple:
    """The deployment ``celery`` (:func:`celery_deployment`) with an empty outreach database
    (same name, recreated from the template) and an empty sink; return ``(dep, token, sink, url)``."""
    dep, token, sink, url, tpl = celery
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    clone_database(admin_url, name, tpl)
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
    """Trigger ``outreach_send`` runs (each awaited, each must succeed) until nothing is queued."""
    for _ in range(runs):
        if not scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'"):
            return
        run_id = trigger(dep, token, "outreach_send")
        assert wait_run(dep, token, "outreach_send", run_id, LONG)["state"] == "success"
    assert not scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'")


def reap_everything_left(url: str) -> None:
    """Run the reaper as if its threshold had passed (what the next send run's plan does then)."""
    reap(url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31))


def held_by(dep, token, url: str, run_id: str, worker: str, *, unstamped: bool = False) -> tuple[list[int], list[dict]]:
    """The rows ``worker``'s running send tasks of run ``run_id`` hold ``sending`` (only those not
    handed over yet with ``unstamped``), and those task instances: ``(email ids, task instances)``."""
    running = [t for t in send_tis(dep, token, run_id) if t["state"] == "running" and t["hostname"] == worker]
    held = [r["id"] for t in running for r in rows(
        url, "SELECT id FROM outreach.emails WHERE status = 'sending' AND claimed_by LIKE %s"
             + (" AND handed_over_at IS NULL" if unstamped else ""),
        (f"%/send_batch[{t['map_index']}]#try{t['try_number']}",))]
    return held, running
