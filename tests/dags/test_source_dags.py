"""The import DAGs of declared lead sources (issue 14) under real Airflow: parsed from the campaign
folder, run twice against the warehouse, each run updating the leads Asset that
``outreach_queue_due`` is scheduled on. The sources themselves: tests/integration/test_sources.py."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest

from outreach.dev.localairflow import airflow_env
from support.airflowhome import SETTINGS_ENV, fresh_home, run_asset_events
from support.flow import rows, scalar
from support.paths import ROOT
from support.sources import WAREHOUSE_ROWS, sql_campaign

PROBE = r"""
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    if "import_source" in dag_id or dag_id == "outreach_queue_due":
        t = dag.timetable
        out["dags"][dag_id] = {"timetable": type(t).__name__, "repr": repr(t),
                               "cron": [getattr(getattr(t, "timetable", t), a, None)
                                        for a in ("expression", "_expression")],
                               "tasks": sorted(dag.task_dict)}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.airflow
def test_the_import_dag_under_airflow_reads_the_warehouse_and_updates_the_leads_asset(
        db_url, warehouse, tmp_path, migrated_airflow_home, shared_airflow):
    wh_url, conn_json = warehouse
    folder = tmp_path / "campaigns"
    sql_campaign(folder)
    # An upstream DAG (a dbt run) producing the source triggers its import through its Asset.
    sql_campaign(folder, key="dbt-fed", schedule="dbt://warehouse/leads_q4")
    home = fresh_home(migrated_airflow_home, tmp_path, "home")
    env = airflow_env(home, db_url, {"warehouse": conn_json},
                      {**SETTINGS_ENV, "OUTREACH_CAMPAIGNS": str(folder)})

    proc = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "dags")], env=env,
                          capture_output=True, text=True, timeout=600)
    parsed = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert parsed["errors"] == {}
    dags = parsed["dags"]
    assert dags["outreach_import_sources"]["tasks"] == ["import_warehouse_q4"]
    assert dags["outreach_import_source_dbt_fed"]["tasks"] == ["import_dbt_fed"]
    assert "dbt://warehouse/leads_q4" in dags["outreach_import_source_dbt_fed"]["repr"]
    queue = dags["outreach_queue_due"]
    assert queue["timetable"] == "AssetOrTimeSchedule" and "*/15 * * * *" in queue["cron"]
    assert "outreach://leads/warehouse-q4" in queue["repr"] and "outreach://leads/dbt-fed" in queue["repr"]

    first = shared_airflow.run_dag(env, "outreach_import_sources", tmp_path / "logs" / "first.log")
    assert first.state == "success", first.log.read_text()[-3000:]
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == WAREHOUSE_ROWS
    with psycopg.connect(wh_url) as c:
        c.execute("UPDATE crm_leads SET account = 'Renamed' WHERE crm_id BETWEEN 100 AND 109")
    second = shared_airflow.run_dag(env, "outreach_import_sources", tmp_path / "logs" / "second.log")
    assert second.state == "success", second.log.read_text()[-3000:]
    latest = rows(db_url, "SELECT imported, updated, unchanged FROM outreach.import_runs ORDER BY id DESC LIMIT 1")
    assert latest == [{"imported": 0, "updated": 10, "unchanged": WAREHOUSE_ROWS - 10}]
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads WHERE company = 'Renamed'") == 10

    # Each run's import task updated the leads Asset that outreach_queue_due is scheduled on.
    for run in (first, second):
        assert [e[:2] for e in run_asset_events(run)] == [
            ("outreach://leads/warehouse-q4", "import_warehouse_q4")]


@pytest.mark.airflow
def test_the_suppression_sources_dag_under_airflow_imports_a_dnc_table_once(
        db_url, warehouse, tmp_path, migrated_airflow_home, shared_airflow):
    wh_url, conn_json = warehouse
    with psycopg.connect(wh_url) as c:
        c.execute("CREATE TABLE dnc (email text)")
        c.execute("INSERT INTO dnc VALUES ('Lead7@Corp7.example'), ('no address here'), "
                  "('@corp3.example')")
    query = tmp_path / "dnc.sql"
    query.write_text("SELECT email FROM dnc")
    sources = tmp_path / "suppression_sources.yaml"
    sources.write_text(f"suppressions:\n  - name: crm-dnc\n"
                       f"    sql: {{conn_id: warehouse, query_file: {query}}}\n")
    env = airflow_env(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, {"warehouse": conn_json},
                      {**SETTINGS_ENV, "OUTREACH_SUPPRESSION_SOURCES": str(sources)})
    dag_id = "outreach_import_suppression_sources"
    first = shared_airflow.run_dag(env, dag_id, tmp_path / "logs" / "dnc-first.log")
    log = first.log.read_text()
    assert first.state == "success", log[-3000:]
    assert "suppression source crm-dnc, row 2, field email: " in log
    assert "lead7@corp7.example" not in log.lower()  # the log masks addresses
    second = shared_airflow.run_dag(env, dag_id, tmp_path / "logs" / "dnc-second.log")
    assert second.state == "success", second.log.read_text()[-3000:]
    assert rows(db_url, "SELECT kind, value, source FROM outreach.suppression_events ORDER BY id") == [
        {"kind": "address", "value": "lead7@corp7.example", "source": "suppressions:crm-dnc"},
        {"kind": "domain", "value": "corp3.example", "source": "suppressions:crm-dnc"}]
