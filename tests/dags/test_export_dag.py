"""The DAG outreach_export, run by real Airflow (``airflow dags test``): its params name the two
targets, a second PostgreSQL database behind an Airflow SQL connection and a file:// folder, and a
second run adds nothing to either."""

from __future__ import annotations

import json

import psycopg
import pytest

from support.airflowhome import env_for, fresh_home
from support.flow import rows
from support.warehouse import WAREHOUSE_CONN_ID

pytestmark = pytest.mark.airflow


def test_export_dag_copies_the_log_once_to_both_targets(db_url, warehouse_url, sink,
                                                         migrated_airflow_home, tmp_path,
                                                         shared_airflow):
    with psycopg.connect(db_url, autocommit=True) as conn:
        for _ in range(7):
            conn.execute("INSERT INTO outreach.events (kind) VALUES ('campaign_paused')")
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    airflow = shared_airflow.bound(env)
    folder = tmp_path / "lake"
    conf = {"conn_id": WAREHOUSE_CONN_ID, "path": folder.as_uri(), "batch_size": 3}
    for round_ in (1, 2):
        result = airflow.run_dag("outreach_export", tmp_path / f"export-{round_}.log", conf=conf)
        assert result.ok, result.log.read_text()[-4000:]

    expected = sorted(r["id"] for r in rows(db_url, "SELECT id FROM outreach.events"))
    assert sorted(r["event_id"] for r in rows(warehouse_url,
                                              "SELECT event_id FROM outreach_events")) == expected
    lines = [json.loads(x) for f in sorted(folder.glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert sorted(x["event_id"] for x in lines) == expected
    assert len(list(folder.glob("*.jsonl"))) == 3  # 7 events in batches of 3
    assert "export files: 7 event(s) in 3 batch(es)" in (tmp_path / "export-1.log").read_text()
