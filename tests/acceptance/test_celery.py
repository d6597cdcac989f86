"""The CeleryExecutor deployment as processes (``make airflow EXECUTOR=celery WORKERS=2``): real
Celery workers on the local Redis, metadata and outreach data on the local PostgreSQL, the real
scheduler and api-server. Select with ``-m celery``.

* A 2,000-lead campaign over 4 mailboxes goes out once, sent by both workers, never more SMTP
  sessions at once than the ``outreach_smtp`` pool has slots.
* A worker SIGKILLed in the middle of a send run: nothing twice, the other worker carries on, and
  every row the killed worker held ends sent, back in the queue or unconfirmed — never stuck.
* Send tasks cleared through the REST API (a finished one and a running one) while the other
  worker runs the same DAG run: nothing twice.

A worker SIGKILLed and PostgreSQL restarted: ``test_celery_restart.py``, on a server of its own.
The deployment and the helpers: ``tests/support/celerydeploy.py``. Waits are generous (a shared
2-core machine schedules slowly); nothing here asserts a duration.
"""

from __future__ import annotations

import os

import pytest

from outreach.dev.deploy import running_pool_slots
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
from support.flow import rows

pytestmark = [pytest.mark.airflow, pytest.mark.celery]

ADMIN_URL = os.environ.get("OUTREACH_CELERY_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="module")
def celery(pg_admin_url, tmp_path_factory):
    """A running CeleryExecutor deployment with two workers on the machine's PostgreSQL."""
    with celery_deployment(ADMIN_URL, tmp_path_factory.mktemp("celery"),
                           metadata_dump(pg_admin_url, tmp_path_factory)) as running:
        yield running


@pytest.fixture
def fresh(celery):
    """The deployment with an empty outreach database and an empty sink."""
    return fresh_state(ADMIN_URL, celery)


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
    campaign(url, tmp_path, 600)
    sink.reset(delay=0.3)  # a batch of 100 takes ≥ 30 s: the kill lands mid-batch
    run_id = trigger(dep, token, "outreach_send")
    victim = dep.worker_name(1)

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
