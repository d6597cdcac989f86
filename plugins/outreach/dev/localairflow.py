"""Run real Airflow locally for the demo and the tests: ``airflow dags test`` in a subprocess
with SQLite metadata under a project-local ``AIRFLOW_HOME``.

Nothing here is used by the DAGs themselves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from outreach.paths import project_root


@dataclass(frozen=True)
class DagRunResult:
    """``dag_id``, final ``state`` (``success``/``failed``/``unknown``), exit ``returncode``,
    and the path of the full ``log``."""

    dag_id: str
    state: str
    returncode: int
    log: Path

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.returncode == 0 and self.state == "success"


def airflow_env(airflow_home: Path, database_url: str, smtp_connections: dict[str, str],
                extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment for Airflow subprocesses.

    :param airflow_home: AIRFLOW_HOME (SQLite metadata lives there).
    :param database_url: the outreach database (``OUTREACH_DATABASE_URL``).
    :param smtp_connections: ``{conn_id: connection JSON}`` set as ``AIRFLOW_CONN_<ID>``.
    """
    root = project_root()
    airflow_home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "OUTREACH_HOME": str(root),
        "OUTREACH_DATABASE_URL": database_url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "plugins"), env.get("PYTHONPATH")])),
    })
    for conn_id, value in smtp_connections.items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = value
    env.update(extra or {})
    return env


def airflow_cmd(*args: str) -> list[str]:
    """Return the command line for ``airflow ARGS`` with this interpreter."""
    return [sys.executable, "-m", "airflow", *args]


def ensure_metadata(env: dict[str, str]) -> None:
    """Create or migrate the SQLite metadata database (skipped when already done).

    :raises RuntimeError: ``airflow db migrate`` failed (its output is included).
    """
    home = Path(env["AIRFLOW_HOME"])
    marker = home / ".migrated"
    if marker.exists() and (home / "airflow.db").exists():
        return
    proc = subprocess.run(airflow_cmd("db", "migrate"), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    marker.write_text("ok\n")


_STATE = re.compile(r"DagRun Finished: .*?state=(\w+)|dag_run_state=['\"]?(\w+)|"
                    r"Dag run .*? (?:finished|ended) .*?state[=:] ?['\"]?(\w+)", re.IGNORECASE)


def run_dag(env: dict[str, str], dag_id: str, log_path: Path, conf: dict | None = None,
            timeout: float = 900) -> DagRunResult:
    """Run one DAG with ``airflow dags test`` and return its final state.

    :param log_path: the full Airflow output is written there.
    :raises subprocess.TimeoutExpired: the run took longer than ``timeout`` seconds.
    """
    args = ["dags", "test", dag_id]
    if conf:
        args += ["-c", json.dumps(conf)]
    proc = subprocess.run(airflow_cmd(*args), env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + "\n" + proc.stderr
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(output)
    states = [next(g for g in m.groups() if g) for m in _STATE.finditer(output)]
    state = states[-1].lower() if states else "unknown"
    return DagRunResult(dag_id, state, proc.returncode, log_path)
