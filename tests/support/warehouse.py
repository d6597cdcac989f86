"""A second real PostgreSQL database playing the warehouse of the export (outreach.export), named
by an Airflow connection (``AIRFLOW_CONN_OUTREACH_TEST_WAREHOUSE``, conn type postgres: the
common-sql hook the export goes through)."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from outreach.dev import embedded

WAREHOUSE_CONN_ID = "outreach_test_warehouse"


@pytest.fixture
def warehouse_url(pg_admin_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """URL of a fresh empty database, also set as the Airflow connection
    :data:`WAREHOUSE_CONN_ID` in this process's environment (so subprocesses inherit it)."""
    name = f"outreach_wh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = embedded.with_database(pg_admin_url, name)
    info = psycopg.conninfo.conninfo_to_dict(url)
    monkeypatch.setenv(f"AIRFLOW_CONN_{WAREHOUSE_CONN_ID.upper()}", json.dumps({
        "conn_type": "postgres", "host": info.get("host"), "port": int(info.get("port") or 5432),
        "login": info.get("user"), "password": info.get("password"), "schema": name}))
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
