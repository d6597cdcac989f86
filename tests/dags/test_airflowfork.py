"""The DAG tests' Airflow sessions forked from a warm Airflow process (support.airflowfork)
behave as fresh ones: each records its runs in the metadata database of its own
``AIRFLOW_HOME`` and writes its own ``airflow.cfg`` there, and a session whose environment differs
in what Airflow reads on import starts in a fresh interpreter."""

from __future__ import annotations

import re
import sqlite3
import subprocess

import psutil
import pytest

from outreach.dev.localairflow import DagTestSession
from support import airflowfork
from support.airflowhome import env_for, fresh_home, run_task_states
from support.flow import import_demo

pytestmark = pytest.mark.airflow


def _runs(home) -> list[tuple[str, str]]:
    with sqlite3.connect(home / "airflow.db") as meta:
        return meta.execute("SELECT dag_id, state FROM dag_run").fetchall()


def test_forked_sessions_record_their_runs_in_their_own_homes(db_url, sink, migrated_airflow_home,
                                                              tmp_path):
    import_demo(db_url)
    homes = [fresh_home(migrated_airflow_home, tmp_path, name) for name in ("a", "b")]
    results = []
    for home in homes:
        with DagTestSession(env_for(home, db_url, sink)) as session:
            assert isinstance(session._proc, airflowfork.ForkedSession)
            server = airflowfork._server
            assert server is not None
            assert psutil.Process(session._proc.pid).ppid() == server.pid
            results.append(session.run_dag("outreach_queue_due", home / "queue.log"))
    keys = set()
    for home, result in zip(homes, results, strict=True):
        assert result.ok, result.log.read_text()[-3000:]
        assert result.metadata == home / "airflow.db"
        assert _runs(home) == [("outreach_queue_due", "success")]  # its own run only
        assert run_task_states(result)["queue_due"] == {"success"}
        # Its airflow.cfg as a fresh process writes it: its own home's paths, a key of its own.
        cfg = (home / "airflow.cfg").read_text()
        assert f"base_log_folder = {home}/logs\n" in cfg
        keys.add(re.search(r"^fernet_key = (\S+)$", cfg, re.MULTILINE).group(1))
    assert len(keys) == 2


def test_a_session_with_an_airflow_option_of_its_own_starts_afresh(db_url, sink, migrated_airflow_home,
                                                                    tmp_path, monkeypatch):
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    with DagTestSession({**env, "AIRFLOW__CORE__PARALLELISM": "3"}) as session:
        assert isinstance(session._proc, subprocess.Popen)
    monkeypatch.setenv("OUTREACH_TEST_AIRFLOW_FORK", "off")
    with DagTestSession(env) as session:
        assert isinstance(session._proc, subprocess.Popen)
