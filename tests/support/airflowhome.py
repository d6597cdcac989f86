"""Real Airflow for the DAG tests: one SQLite metadata database migrated per run, copied into a
fresh AIRFLOW_HOME per test (a migration takes ~30 s, a copy milliseconds), the environment of
an ``airflow dags test`` subprocess (:func:`outreach.dev.localairflow.airflow_env`), sessions
running a test's DAG runs one after the other in one Airflow process (:func:`dag_session`), and
one Airflow process per pytest worker that runs the DAG tests' runs one after the other
(:func:`shared_airflow`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from outreach.dev import localairflow
from outreach.dev.localairflow import (
    DagRunResult,
    DagTestSession,
    airflow_env,
    bound_at_start,
    ensure_metadata,
    run_dag,
)
from support import airflowfork
from support.once import once
from support.paths import SMTP_CONN_IDS

# Pacing and the gap off: these runs send the whole sample in one outreach_send run (pacing is tested with a
# fixed clock in tests/integration/test_pacing.py). A failed task's retry at once, not after
# Airflow's 300 s (`dags test` waits for it): the tests of failing tasks set the same, so their
# sessions fork from the same warm process as the others' (support.airflowfork).
SETTINGS_ENV = {"OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "0"}


# Every DagTestSession of this worker (run_dag, dag_session, shared_airflow) forked from a warm
# Airflow process whose environment is the standard one below, when the session's allows it.
localairflow.session_starter = airflowfork.starter(SETTINGS_ENV)


@pytest.fixture(scope="session")
def migrated_airflow_home() -> Path:
    """An AIRFLOW_HOME whose SQLite metadata database is migrated once per run (every pytest-xdist
    worker copies the same file: :func:`support.once.once`); never written after."""
    home, _ = once("airflow-sqlite-home", lambda home: ensure_metadata(airflow_env(home, "unused", {})))
    return home


def fresh_home(migrated: Path, tmp_path: Path, name: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    shutil.copy(migrated / "airflow.db", home / "airflow.db")
    (home / ".migrated").write_text("ok\n")
    return home


def env_for(home: Path, db_url: str, sink) -> dict[str, str]:
    conn = sink.connection_json()
    return airflow_env(home, db_url, {c: conn for c in SMTP_CONN_IDS}, SETTINGS_ENV)


@pytest.fixture
def dag_session():
    """Open a :class:`~outreach.dev.localairflow.DagTestSession` on an environment: the test's
    DAG runs one after the other in one Airflow process (its start-up, ~10 s, paid once), each
    still Airflow's own ``dags test`` command with its own log. Closed after the test."""
    sessions: list[DagTestSession] = []

    def open_session(env: dict[str, str]) -> DagTestSession:
        sessions.append(DagTestSession(env))
        return sessions[-1]

    yield open_session
    for session in sessions:
        session.close()


class SharedAirflow:
    """One Airflow process for the DAG runs of every test on this pytest worker (tests run one
    after the other there): its start-up (interpreter, imports, the in-process execution API:
    ~12 CPU-seconds) is paid once per worker instead of once per test; a further run costs ~1-2
    CPU-seconds. Each run is still Airflow's own ``airflow dags test`` with its own log, the
    DAG folder parsed again, in the test's environment (connections, ``OUTREACH_*``, the outreach
    database); the process keeps its own AIRFLOW_HOME and metadata database. A test whose
    environment differs in what Airflow reads at start-up (an ``AIRFLOW__*`` option:
    :func:`~outreach.dev.localairflow.bound_at_start`) gets a process of its own
    (:func:`~outreach.dev.localairflow.run_dag`), as does every run when the process died.

    ``OUTREACH_TEST_SHARED_AIRFLOW=off``: every run in a process of its own, as before (to
    compare, or to rule the sharing out).

    A test reads what its own run recorded with :func:`run_task_states` and
    :func:`run_asset_events` (filtered by the run's id). Not for a test that reads what no run id
    names (the asset-triggered DAG queue, ``dags reserialize``), or proves something of a separate
    process (two runs at once, a second process): those call ``run_dag`` or open a
    :func:`dag_session` on a home of their own."""

    def __init__(self, migrated: Path, folder: Path) -> None:
        self._migrated, self._folder = migrated, folder
        self._session: DagTestSession | None = None
        self._started = 0
        # What every DAG test's environment (env_for) has of what Airflow reads at start-up.
        self._standard = bound_at_start(airflow_env(folder / "standard", "unused", {}, SETTINGS_ENV))

    def _base_env(self, like: dict[str, str]) -> dict[str, str]:
        self._started += 1
        home = fresh_home(self._migrated, self._folder, f"home-{self._started}")
        return {**like, "AIRFLOW_HOME": str(home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}"}

    def run_dag(self, env: dict[str, str], dag_id: str, log_path: Path, conf: dict | None = None,
                timeout: float = 900) -> DagRunResult:
        """Run ``dag_id`` like :func:`~outreach.dev.localairflow.run_dag` (same arguments, same
        result) in the worker's Airflow process."""
        if bound_at_start(env) != self._standard or os.environ.get("OUTREACH_TEST_SHARED_AIRFLOW") == "off":
            return run_dag(env, dag_id, log_path, conf=conf, timeout=timeout)
        if self._session is None or not self._session.alive:
            if self._session is not None:
                self._session.close()
            self._session = DagTestSession(self._base_env(env))
        return self._session.run_dag(dag_id, log_path, conf=conf, timeout=timeout, env=env)

    def bound(self, env: dict[str, str]) -> _Bound:
        """``env`` bound: an object whose ``run_dag(dag_id, log_path, conf=None)`` runs here,
        as a :class:`DagTestSession`'s does."""
        return _Bound(self, env)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()


class _Bound:
    def __init__(self, shared: SharedAirflow, env: dict[str, str]) -> None:
        self._shared, self._env = shared, env

    def run_dag(self, dag_id: str, log_path: Path, conf: dict | None = None,
                timeout: float = 900) -> DagRunResult:
        return self._shared.run_dag(self._env, dag_id, log_path, conf=conf, timeout=timeout)


@pytest.fixture(scope="session")
def shared_airflow(migrated_airflow_home: Path, tmp_path_factory) -> SharedAirflow:
    """This worker's :class:`SharedAirflow` (its process started at the first run)."""
    shared = SharedAirflow(migrated_airflow_home, tmp_path_factory.mktemp("shared-airflow"))
    yield shared
    shared.close()


def _recorded(result: DagRunResult) -> sqlite3.Connection:
    """A read-only connection to the metadata database of ``result``, once its run is found
    there (a run id parsed wrong would otherwise read as a run that recorded nothing)."""
    assert result.metadata and result.run_id, (
        f"{result.dag_id}: no run recorded in a SQLite metadata database, see {result.log}")
    meta = sqlite3.connect(f"file:{result.metadata}?mode=ro", uri=True)
    found = meta.execute("SELECT 1 FROM dag_run WHERE dag_id = ? AND run_id = ?",
                         (result.dag_id, result.run_id)).fetchone()
    if not found:
        meta.close()
        raise AssertionError(f"{result.dag_id}: no run {result.run_id!r} in {result.metadata}, "
                             f"see {result.log}")
    return meta


def run_task_states(result: DagRunResult) -> dict[str, set[str]]:
    """``{task_id: {state, …}}`` of the DAG run ``result``, as its metadata database has them
    (a process of its own or the worker's shared one: only that run's task instances)."""
    with contextlib.closing(_recorded(result)) as meta:
        out: dict[str, set[str]] = {}
        for task_id, state in meta.execute("SELECT task_id, state FROM task_instance"
                                           " WHERE dag_id = ? AND run_id = ?",
                                           (result.dag_id, result.run_id)):
            out.setdefault(task_id, set()).add(state)
        return out


def run_asset_events(result: DagRunResult) -> list[tuple[str, str, dict]]:
    """The asset events the DAG run ``result`` recorded, in order: ``(asset URI as Airflow
    stores it, source task id, extra)``."""
    with contextlib.closing(_recorded(result)) as meta:
        return [(uri, task, json.loads(extra)) for uri, task, extra in meta.execute(
            "SELECT a.uri, e.source_task_id, e.extra FROM asset_event e JOIN asset a"
            " ON a.id = e.asset_id WHERE e.source_dag_id = ? AND e.source_run_id = ?"
            " ORDER BY e.id", (result.dag_id, result.run_id))]
