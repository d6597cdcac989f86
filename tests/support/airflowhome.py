"""Real Airflow for the DAG tests: one SQLite metadata database migrated per session, copied into a
fresh AIRFLOW_HOME per test (a migration takes ~30 s, a copy milliseconds), the environment of
an ``airflow dags test`` subprocess (:func:`outreach.dev.localairflow.airflow_env`), and sessions
running a test's DAG runs one after the other in one Airflow process (:func:`dag_session`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from outreach.dev.localairflow import DagTestSession, airflow_env, ensure_metadata
from support.paths import SMTP_CONN_IDS

# Pacing and the gap off: these runs send the whole sample in one outreach_send run (pacing is tested with a
# fixed clock in tests/integration/test_pacing.py).
SETTINGS_ENV = {"OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0"}


@pytest.fixture(scope="session")
def migrated_airflow_home(tmp_path_factory) -> Path:
    """An AIRFLOW_HOME whose SQLite metadata database is migrated once per session."""
    home = tmp_path_factory.mktemp("airflow-home")
    ensure_metadata(airflow_env(home, "unused", {}))
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
