"""An Airflow task without a database fails loudly (real Airflow, ``airflow dags test``): with
neither the connection ``outreach_db`` nor ``OUTREACH_DATABASE_URL`` the task fails naming what to
set, and no embedded PostgreSQL is started on the worker. The CLI's side:
tests/integration/test_database_config.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from outreach.dev.localairflow import airflow_env, ensure_metadata, run_dag
from outreach.settings import NO_DATABASE
from support.airflowhome import fresh_home


def no_embedded_server_started(tmp_path) -> bool:
    return not (tmp_path / "state" / "pgdata").exists()


@pytest.mark.airflow
def test_airflow_task_without_a_database_fails_loudly(tmp_path, migrated_airflow_home):
    # A copy of the session's migrated metadata database: ensure_metadata below finds it done.
    env = airflow_env(fresh_home(migrated_airflow_home, tmp_path, "airflow-home"), "unused", {})
    for k in ("OUTREACH_DATABASE_URL", "AIRFLOW_CONN_OUTREACH_DB", "OUTREACH_EMBEDDED_DB"):
        env.pop(k, None)
    env["OUTREACH_STATE_DIR"] = str(tmp_path / "state")
    env["AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY"] = "0"  # its one retry, without waiting 5 min
    env.update({"OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789"})
    ensure_metadata(env)
    try:
        result = run_dag(env, "outreach_queue_due", tmp_path / "queue.log")
    finally:
        if not no_embedded_server_started(tmp_path):  # the old behaviour: stop what it started
            pg_ctl = shutil.which("pg_ctl") or str(
                __import__("pgserver").__path__[0] + "/pginstall/bin/pg_ctl")
            subprocess.run([pg_ctl, "-D", str(tmp_path / "state" / "pgdata"), "stop", "-m", "fast"],
                           capture_output=True)
    assert not result.ok
    assert NO_DATABASE in result.log.read_text()
    assert no_embedded_server_started(tmp_path)
