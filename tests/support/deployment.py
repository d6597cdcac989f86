"""The real deployment for the acceptance tests: api-server, scheduler, dag-processor and
triggerer (:class:`outreach.dev.deploy.Deployment`, own PostgreSQL metadata database) started and
stopped around a test, and the REST API calls the tests make of it (trigger, wait, clear)."""

from __future__ import annotations

import contextlib
import time
import uuid

import psutil
import psycopg

from outreach.dev import embedded
from outreach.dev.deploy import Deployment, sqlalchemy_url

FINAL = {"success", "failed"}


@contextlib.contextmanager
def running_deployment(pg_admin_url: str, db_url: str, tmp_path, env: dict[str, str]):
    """Start the real deployment (own metadata database) with ``env``; stop it after, and check
    that no process is left behind."""
    meta = f"airflow_meta_{uuid.uuid4().hex[:8]}"
    meta_url = embedded.ensure_database(pg_admin_url, meta)
    dep = Deployment(home=tmp_path / "airflow", metadata_url=sqlalchemy_url(meta_url), outreach_url=db_url,
                     env_extra=env)
    dep.migrate()
    dep.start()
    try:
        dep.wait_ready()
        yield dep
    finally:
        pids = [p.pid for p in dep.procs.values()]
        dep.stop()
        time.sleep(1)
        left = [p for p in psutil.process_iter(["pid", "cmdline", "environ"])
                if p.info["environ"] and p.info["environ"].get("AIRFLOW_HOME") == str(dep.home)]
        assert not left, f"processes left behind: {[p.info['cmdline'] for p in left]} (started {pids})"
        with psycopg.connect(pg_admin_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{meta}" WITH (FORCE)')


# Only the runs a test triggers: a scheduled outreach_send firing at a 10-minute boundary would
# send rows the counts expect to be still queued.
BASE_ENV = {"OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
            "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
            "OUTREACH_BATCH_SIZE": "25",
            "OUTREACH_SEND_INTERVAL_MINUTES": "0",
            "OUTREACH_SEND_GAP_SECONDS": "0",
            "OUTREACH_SEND_PARALLELISM": "4",
            "OUTREACH_SCHEDULES": "off",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"}


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def trigger(dep: Deployment, token: str, dag_id: str, conf: dict | None = None) -> str:
    """Trigger a run through the REST API; return its run id."""
    return dep.api("POST", f"/dags/{dag_id}/dagRuns", token,
                   json={"logical_date": None, "conf": conf or {}})["dag_run_id"]


def wait_run(dep: Deployment, token: str, dag_id: str, run_id: str, timeout: float = 300) -> dict:
    return wait_for(lambda: (r := dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}", token))["state"] in FINAL and r,
                    timeout, f"{dag_id} run {run_id}")


def run_and_wait(dep: Deployment, token: str, dag_id: str, timeout: float = 300) -> dict:
    return wait_run(dep, token, dag_id, trigger(dep, token, dag_id), timeout)


def task_instances(dep, token, dag_id, run_id) -> list[dict]:
    return dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", token)["task_instances"]


def clear_and_wait(dep, token, run_id: str, tis: list[dict], *, only_failed: bool) -> dict:
    """Clear send_batch task instances (and what follows them) through the REST API; wait for the
    run to finish again; return the run."""
    dep.api("POST", "/dags/outreach_send/clearTaskInstances", token, json={
        "dag_run_id": run_id, "task_ids": [["send_batch", t["map_index"]] for t in tis],
        "only_failed": only_failed, "dry_run": False, "reset_dag_runs": True, "include_downstream": True})

    def rerun_done():
        now = {(t["map_index"]): t for t in task_instances(dep, token, "outreach_send", run_id)
               if t["task_id"] == "send_batch"}
        if not all(now[t["map_index"]]["try_number"] > t["try_number"] for t in tis):
            return None
        run = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)
        return run if run["state"] in FINAL else None

    return wait_for(rerun_done, 300, "the cleared task instances to run again")


def send_tis(dep, token, run_id: str) -> list[dict]:
    return [t for t in task_instances(dep, token, "outreach_send", run_id) if t["task_id"] == "send_batch"]


def accepted_once(messages) -> None:
    ids = [m["Message-ID"] for m in messages]
    assert len(ids) == len(set(ids)), "a Message-ID was accepted twice"
