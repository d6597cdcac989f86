"""Campaigns that read their leads from a declared source (issue 14): a warehouse table in a second
PostgreSQL database on the test server, reached through the Airflow connection ``warehouse``, and
files dropped into a folder."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from outreach.dev import embedded
from support.paths import CAMPAIGN

WAREHOUSE_ROWS = 2_500
"""Rows of the warehouse table: more than one fetch of :func:`sql_campaign`'s ``fetch_size``
(three, the last one short). Size is what ``make bench``'s import row measures; 20,000 rows here
cost ~60 s of the suite for the same path."""
HEAD = CAMPAIGN.read_text().split("steps:")[0]
STEPS = "steps:" + CAMPAIGN.read_text().split("steps:", 1)[1]


@pytest.fixture
def warehouse(pg_admin_url, monkeypatch):
    """A second database on the test server with a ``crm_leads`` table of WAREHOUSE_ROWS rows,
    and the Airflow connection ``warehouse`` (AIRFLOW_CONN_WAREHOUSE, conn type postgres)."""
    name = f"warehouse_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    url = embedded.with_database(pg_admin_url, name)
    with psycopg.connect(url) as c:
        c.execute("CREATE TABLE crm_leads (crm_id integer PRIMARY KEY, work_email text, "
                  "first_name text, account text, city text, active boolean DEFAULT true)")
        c.execute("INSERT INTO crm_leads SELECT i, 'lead' || i || '@corp' || (i %% 97) || '.example', "
                  "'First' || i, 'Account ' || (i %% 500), 'City ' || (i %% 40) "
                  "FROM generate_series(1, %s) i", (WAREHOUSE_ROWS,))
    info = conninfo_to_dict(url)
    conn = {"conn_type": "postgres", "host": info.get("host"), "port": int(info.get("port") or 5432),
            "login": info.get("user"), "password": info.get("password") or None, "schema": name}
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", json.dumps(conn))
    yield url, json.dumps(conn)
    with psycopg.connect(pg_admin_url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql_campaign(folder, *, key="warehouse-q4", stop=False, schedule=None):
    """A campaign file reading ``crm_leads`` (active rows) through connection ``warehouse``."""
    folder.mkdir(exist_ok=True)
    query = folder / "leads_q4.sql"
    query.write_text("SELECT crm_id, work_email, first_name, account AS company, city\n"
                     "FROM crm_leads WHERE active ORDER BY crm_id\n")
    path = folder / f"{key}.yaml"
    path.write_text(HEAD.replace("key: q4-ops-intro", f"key: {key}") +
                    "custom_columns: [city]\n"
                    f"source:\n  sql: {{conn_id: warehouse, query_file: {query}, fetch_size: 1000}}\n"
                    f"  id_column: crm_id\n  stop_when_missing: {'true' if stop else 'false'}\n"
                    + (f'schedule: "{schedule}"\n' if schedule else "") + STEPS)
    return path


def file_campaign(folder, url: str, key="files-q4"):
    folder.mkdir(exist_ok=True)
    path = folder / f"{key}.yaml"
    path.write_text(HEAD.replace("key: q4-ops-intro", f"key: {key}") +
                    f'source:\n  files: {{path: "{url}"}}\n' + STEPS)
    return path


def drop(folder, name: str, n: int, start: int = 0) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("Email;Company;City\n" + "".join(
        f"f{i}@drop.example;Drop Ltd;Bonn\n" for i in range(start, start + n)), encoding="utf-8")
