"""A Celery deployment gives the scheduler time to publish a task to the broker: Airflow's own
1 s ``[celery] operation_timeout`` fails a task whose publish is slow (a loaded host, the first
connection to Redis) before it ever starts, and its next try waits ``retry_delay`` (300 s).
Read back by Airflow itself from the environment every component gets."""

from __future__ import annotations

import subprocess
import sys

from outreach.dev.deploy import CELERY_OPERATION_TIMEOUT, Deployment, shared_settings


def airflow_value(env: dict[str, str], section: str, key: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "airflow", "config", "get-value", section, key],
                          env=env, capture_output=True, text=True, timeout=300, check=True)
    return proc.stdout.strip().splitlines()[-1]


def test_the_celery_components_publish_with_a_timeout_above_airflows_one_second(tmp_path):
    dep = Deployment(home=tmp_path / "home", metadata_url="postgresql+psycopg2://u@/airflow",
                     outreach_url="postgresql://u@/outreach", executor="CeleryExecutor", workers=2)
    assert float(airflow_value(dep.env(), "celery", "operation_timeout")) == float(
        CELERY_OPERATION_TIMEOUT) >= 10
    # docker-compose.yaml runs the same settings (tests/acceptance/test_compose.py).
    assert shared_settings("CeleryExecutor")["AIRFLOW__CELERY__OPERATION_TIMEOUT"] == \
        CELERY_OPERATION_TIMEOUT
    assert "AIRFLOW__CELERY__OPERATION_TIMEOUT" not in shared_settings("LocalExecutor")
