"""Issue 14 under the real scheduler (api-server, scheduler, dag-processor and triggerer;
LocalExecutor, PostgreSQL metadata): an import run updates the campaign's leads Asset and the
scheduler starts ``outreach_queue_due`` from it. A deployment of its own: the schedules are on
(the deployment the operator tests share has them off)."""

from __future__ import annotations

import pytest

from support.deployment import BASE_ENV, FINAL, only_dags, run_and_wait, running_deployment, wait_for
from support.flow import rows, scalar
from support.sources import drop, file_campaign

pytestmark = pytest.mark.airflow


def test_an_import_run_triggers_queue_due_through_the_leads_asset(pg_admin_url, airflow_meta_template, db_url,
                                                                 tmp_path):
    """Issue 14: the real scheduler starts ``outreach_queue_due`` from the leads Asset an import
    run updated, without waiting for its cron. Schedules stay on (``OUTREACH_SCHEDULES=off`` turns
    Asset schedules off too: no DAG is scheduled), but neither cron can fire during the test: the
    campaign's import DAG is scheduled only on an Asset nothing updates, and queue_due's cron is
    New Year (its one catch-up run on unpausing, before any lead exists, is waited for first)."""
    inbox, folder = tmp_path / "inbox", tmp_path / "campaigns"
    drop(inbox, "a.csv", 5)
    campaign = file_campaign(folder, f"file://{inbox}/*.csv")
    campaign.write_text(campaign.read_text().replace("source:", 'schedule: "dbt://nothing/updates-this"\nsource:'))
    importer = "outreach_import_source_files_q4"
    env = {k: v for k, v in BASE_ENV.items() if k != "OUTREACH_SCHEDULES"}
    with running_deployment(pg_admin_url, airflow_meta_template, db_url, tmp_path, {
            **env, "OUTREACH_CAMPAIGNS": str(folder), "OUTREACH_QUEUE_DUE_SCHEDULE": "0 0 1 1 *",
            **only_dags(tmp_path / "dags", "outreach_import_sources", "outreach_queue_due")}) as dep:
        token = dep.token()
        wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", token)["dags"]} >=
                 {importer, "outreach_queue_due"}, 180, "the dag-processor to parse the DAGs")

        def queue_runs() -> list[dict]:
            return dep.api("GET", "/dags/outreach_queue_due/dagRuns", token)["dag_runs"]

        dep.api("PATCH", "/dags/outreach_queue_due", token, json={"is_paused": False})
        [catch_up] = wait_for(lambda: (r := queue_runs()) and all(x["state"] in FINAL for x in r) and r,
                              180, "queue_due's catch-up run on unpausing")
        assert catch_up["run_type"] == "scheduled" and catch_up["state"] == "success"

        dep.api("PATCH", f"/dags/{importer}", token, json={"is_paused": False})
        imported = run_and_wait(dep, token, importer)
        assert imported["state"] == "success"
        assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 5

        by_asset = wait_for(lambda: [r for r in queue_runs() if r["run_type"] == "asset_triggered"
                                     and r["state"] in FINAL], 180, "an asset-triggered queue_due run")
        assert [r["state"] for r in by_asset] == ["success"]
        events = dep.api("GET", f"/dags/outreach_queue_due/dagRuns/{by_asset[0]['dag_run_id']}"
                         "/upstreamAssetEvents", token)["asset_events"]
        assert [(e["uri"], e["source_dag_id"], e["source_run_id"]) for e in events] == [
            ("outreach://leads/files-q4", importer, imported["dag_run_id"])]
        assert sorted(r["run_type"] for r in queue_runs()) == ["asset_triggered", "scheduled"]
    queued = rows(db_url, "SELECT l.email, s.position, e.status FROM outreach.emails e "
                  "JOIN outreach.leads l ON l.id = e.lead_id JOIN outreach.sequence_steps s ON s.id = e.step_id "
                  "ORDER BY l.email")
    assert queued == [{"email": f"f{i}@drop.example", "position": 1, "status": "queued"} for i in range(5)]
