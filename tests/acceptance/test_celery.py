"""One CeleryExecutor deployment as processes for four tests (``make airflow EXECUTOR=celery``).

Real Celery workers (two) on the local Redis, the real scheduler and api-server, their metadata
and the outreach data on a PostgreSQL of this module's own (an embedded server, so that the
restart of the last test disturbs no other test). Select with ``-m celery``. In this order:

* A 2,000-lead campaign over 4 mailboxes goes out once, sent by both workers, never more SMTP
  sessions at once than the ``outreach_smtp`` pool has slots.
* A worker SIGKILLed in the middle of a send run: nothing twice, the other worker carries on, and
  every row the killed worker held ends sent, back in the queue or unconfirmed — never stuck.
* Send tasks cleared through the REST API (a finished one and a running one) while the other
  worker runs the same DAG run: nothing twice.
* A worker SIGKILLed while PostgreSQL restarts under it, supervised as ``make airflow``
  supervises it: everything stays up, the dead worker comes back, every lead gets its email
  exactly once, and the dead worker's rows never handed over are sent within minutes (the
  reaper's short release), not after the 30-minute rule. Last: it restarts the server.

The deployment and the helpers: ``tests/support/celerydeploy.py``. Waits are generous (a shared
2-core machine schedules slowly); nothing here asserts a duration.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from outreach.dev.deploy import running_pool_slots
from outreach.resolve import resolve
from support import invariants
from support.celerydeploy import (
    LONG,
    MAILBOXES,
    POOL_SLOTS,
    campaign,
    celery_deployment,
    fresh_state,
    held_by,
    reap_everything_left,
    send_until_empty,
)
from support.deployment import accepted_once, metadata_dump, send_tis, trigger, wait_for, wait_run
from support.embeddedpg import embedded_server
from support.flow import rows, scalar

pytestmark = [pytest.mark.airflow, pytest.mark.celery]


@pytest.fixture(scope="module")
def own_server():
    """The module's own embedded PostgreSQL: ``(admin_url, restart)``."""
    with embedded_server("outreach-celery-pg-") as server:
        yield server


@pytest.fixture(scope="module")
def celery(own_server, pg_admin_url, tmp_path_factory):
    """A running CeleryExecutor deployment with two workers on the module's server."""
    with celery_deployment(own_server[0], tmp_path_factory.mktemp("celery"),
                           metadata_dump(pg_admin_url, tmp_path_factory)) as running:
        yield running


@pytest.fixture
def fresh(celery, own_server):
    """The deployment with an empty outreach database and an empty sink."""
    return fresh_state(own_server[0], celery)


def slow_run(fresh, tmp_path) -> tuple[str, str]:
    """Trigger an ``outreach_send`` run of 600 leads at a sink answering 0.3 s late (a batch of
    100 takes ≥ 30 s: a kill lands mid-batch); return its run id and the worker to kill."""
    dep, token, sink, url = fresh
    campaign(url, tmp_path, 600)
    sink.reset(delay=0.3)
    return trigger(dep, token, "outreach_send"), dep.worker_name(1)


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
    # A worker started later (outreach airflow worker) reads this pool from the metadata database.
    assert running_pool_slots(dep.metadata_url) == POOL_SLOTS


def test_a_worker_killed_mid_send_loses_and_repeats_nothing(fresh, tmp_path):
    dep, token, sink, url = fresh
    run_id, victim = slow_run(fresh, tmp_path)

    def sending_on_victim():
        held, running = held_by(dep, token, url, run_id, victim)
        return (held, running) if held and len(sink.messages()) > 0 else None

    held, killed = wait_for(sending_on_victim, LONG, f"a send task of {victim} in the middle of its batch")
    sent_before = len(sink.messages())
    dep.kill_worker(1)
    sink.answer_at_once()  # the kill landed mid-batch; the rest need not wait 0.3 s a message

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


# Keep this test last in the module: it restarts the server the deployment runs on.
@pytest.mark.timeout(2700)  # a kill, a restart and the release (and the deployment, run alone): a busy machine
def test_a_killed_worker_and_a_database_restart_leave_the_deployment_up(fresh, own_server, tmp_path):
    dep, token, sink, url = fresh
    run_id, victim = slow_run(fresh, tmp_path)

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

