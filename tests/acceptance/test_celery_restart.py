"""A CeleryExecutor deployment (``tests/support/celerydeploy.py``) whose worker is SIGKILLed
while PostgreSQL restarts under it, supervised as ``make airflow`` supervises it: everything
stays up, the dead worker comes back, every lead gets its email exactly once at the sink, and
the dead worker's rows never handed over are sent within minutes (the reaper's short release),
not after the 30-minute rule.

The deployment's metadata and outreach databases live on a PostgreSQL of this module's own (an
embedded server, restarted with ``pg_ctl restart``), so the restart disturbs no other test and
this module runs beside ``test_celery.py`` on another pytest worker."""

from __future__ import annotations

import atexit
import datetime as dt
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from outreach.resolve import resolve
from support import invariants
from support.celerydeploy import (
    LONG,
    campaign,
    celery_deployment,
    held_by,
    reap_everything_left,
    send_until_empty,
)
from support.deployment import accepted_once, metadata_dump, trigger, wait_for, wait_run
from support.flow import rows, scalar

pytestmark = [pytest.mark.airflow, pytest.mark.celery]


@pytest.fixture(scope="module")
def own_server():
    """An embedded PostgreSQL of this module's own; yields ``(admin_url, restart)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver._commands import pg_ctl

        # Outside pytest's basetemp, as tests/conftest.py's pg_admin_url (the server's own user).
        pgdata = Path(tempfile.mkdtemp(prefix="outreach-celery-pg-"))
        server = pgserver.get_server(str(pgdata), cleanup_mode="stop")

    def restart() -> None:
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)

    yield server.get_uri(), restart
    server.cleanup()
    atexit.unregister(server._cleanup)
    shutil.rmtree(pgdata, ignore_errors=True)


@pytest.fixture(scope="module")
def celery(own_server, pg_admin_url, tmp_path_factory):
    with celery_deployment(own_server[0], tmp_path_factory.mktemp("celery"),
                           metadata_dump(pg_admin_url, tmp_path_factory)) as running:
        yield running


@pytest.mark.timeout(2700)  # a deployment, a kill, a restart and the release: on a busy machine
def test_a_killed_worker_and_a_database_restart_leave_the_deployment_up(celery, own_server, tmp_path):
    dep, token, sink, url, _ = celery
    campaign(url, tmp_path, 600)
    sink.reset(delay=0.3)  # a batch of 100 takes ≥ 30 s: the kill lands mid-batch
    run_id = trigger(dep, token, "outreach_send")
    victim = dep.worker_name(1)

    def victim_mid_batch():
        held = held_by(dep, token, url, run_id, victim, unstamped=True)[0]
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
    # PostgreSQL restarts: every connection of every component is cut. Proven, not assumed: the
    # server's start time moves and none of the components' sessions of before survives it.
    admin = own_server[0]
    sessions = ("SELECT pid, backend_start FROM pg_stat_activity WHERE datname <> 'postgres' "
                "AND pid <> pg_backend_pid()")
    started_before = scalar(admin, "SELECT pg_postmaster_start_time()")
    before = {(r["pid"], r["backend_start"]) for r in rows(admin, sessions)}
    assert before, "no component had a session open before the restart"
    own_server[1]()
    assert scalar(admin, "SELECT pg_postmaster_start_time()") > started_before
    assert not before & {(r["pid"], r["backend_start"]) for r in rows(admin, sessions)}
    sink.answer_at_once()  # the kill and the restart landed mid-batch; the rest need not wait

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

