"""Issue 26, item 2, end to end under the real scheduler: a reply appended to a real Dovecot →
``outreach_inbox`` records it and updates ``outreach://events/replies`` (the event's id range in
the extra) → a team's own DAG scheduled on that Asset runs, asset-triggered, and sees the range.

In the deployment the operator tests share (``local_deployment``): the team drops its DAG file
into the DAG folder beside the shipped ones and waits for the dag-processor to find it.
``OUTREACH_SCHEDULES=off`` (BASE_ENV) leaves the inbox's cron off; the team's DAG has its own
Asset schedule."""

from __future__ import annotations

import pytest

from support.deployment import FINAL, run_and_wait, wait_for
from support.flow import rows
from support.inboxflow import replied_campaign

pytestmark = pytest.mark.airflow

TEAM_DAG = '''
from airflow.sdk import Asset, dag, task

REPLIES = Asset("outreach://events/replies")


@dag(dag_id="crm_sync_replies", schedule=[REPLIES], catchup=False)
def crm_sync_replies():
    @task
    def sync(*, triggering_asset_events=None):
        return [dict(e.extra) for e in triggering_asset_events[REPLIES]]

    sync()


crm_sync_replies()
'''


def test_a_reply_runs_a_dag_scheduled_on_the_replies_asset(local_deployment, sink, settings, tmp_path,
                                                            imap_accounts):
    dep, token, db_url = local_deployment.dep, local_deployment.token, local_deployment.url
    imap_accounts.adopt(local_deployment.imap_logins)
    replied_campaign(db_url, tmp_path, settings, imap_accounts, "rita@reply.example", "Yes, let's talk.")
    (local_deployment.dags_folder / "crm_sync_replies.py").write_text(TEAM_DAG)
    wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", token)["dags"]} >=
             {"outreach_inbox", "crm_sync_replies"}, 180, "the dag-processor to parse the DAGs")
    for dag_id in ("outreach_inbox", "crm_sync_replies"):
        dep.api("PATCH", f"/dags/{dag_id}", token, json={"is_paused": False})
    inbox = run_and_wait(dep, token, "outreach_inbox")
    assert inbox["state"] == "success"
    [reply] = rows(db_url, "SELECT id FROM outreach.events WHERE kind = 'replied'")

    def team_runs() -> list[dict]:
        return [r for r in dep.api("GET", "/dags/crm_sync_replies/dagRuns", token)["dag_runs"]
                if r["state"] in FINAL]

    [run] = wait_for(team_runs, 180, "the team's DAG run started by the replies Asset")
    assert run["run_type"] == "asset_triggered" and run["state"] == "success"
    events = dep.api("GET", f"/dags/crm_sync_replies/dagRuns/{run['dag_run_id']}"
                     "/upstreamAssetEvents", token)["asset_events"]
    assert [(e["uri"], e["source_dag_id"], e["source_run_id"], e["extra"]) for e in events] == [
        ("outreach://events/replies", "outreach_inbox", inbox["dag_run_id"],
         {"first_id": reply["id"], "last_id": reply["id"], "count": 1, "kinds": ["replied"]})]
