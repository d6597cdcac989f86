"""Launch approval in the Airflow UI (issue 24, item 4), in the real deployment (api-server,
scheduler, dag-processor, triggerer; LocalExecutor, PostgreSQL metadata): a draft campaign
submitted for approval gets a Required Action from ``outreach_campaign_approval`` showing what
approving does; answered through the REST API as the UI's Required Actions page does it, a
rejection sends it back to draft with the typed reason, and an approval (by the logged-in user,
at the time they answered) makes the next ``outreach_queue_due`` queue its steps.

Slow (a deployment and four runs): run it alone, ``nice .venv/bin/python -m pytest
tests/acceptance/test_campaign_approval.py``.
"""

from __future__ import annotations

import datetime as dt

import pytest

from outreach.campaign_pause import change_status
from outreach.leads import import_leads
from outreach.suppression import import_suppressions
from support.deployment import (
    task_instances,
    trigger,
    wait_answerable,
    wait_for,
    wait_run,
)
from support.flow import EXPECTED_LEADS, rows, scalar
from support.paths import CAMPAIGN, DNC, LEADS, MAILBOXES

pytestmark = pytest.mark.airflow

DAG = "outreach_campaign_approval"
KEY = "q4-ops-intro"


def _answer(dep, token, run_id: str, chosen: str, reason: str) -> dict:
    """Wait for the run's Required Action, check what it shows, answer it as the UI does."""
    wait_answerable(dep, token, DAG, run_id, "decide")
    path = f"/dags/{DAG}/dagRuns/{run_id}/taskInstances/decide/-1/hitlDetails"
    detail = dep.api("GET", path, token)
    assert detail["options"] == ["approve", "reject"] and not detail["defaults"]
    assert detail["subject"] == f"Launch campaign {KEY}? {EXPECTED_LEADS} lead(s)"
    body = detail["body"]
    assert f"**{EXPECTED_LEADS} lead(s) to be contacted** by step 1" in body, body
    assert "| anna — sales | active | " in body, body  # volume per mailbox, by its label
    assert "| mail.outreach-demo.example | not checked (OUTREACH\\_PREFLIGHT=off) |" in body, body
    assert body.count("Subject: ") == 2, body  # two sample renders
    addresses = [r["email"] for r in rows(dep.outreach_url, "SELECT email FROM outreach.leads")]
    assert not [a for a in addresses if a in body]  # lead addresses are masked
    return dep.api("PATCH", path, token, json={"chosen_options": [chosen],
                                               "params_input": {"reason": reason}})


def test_a_campaign_is_rejected_then_approved_in_a_required_action_and_queued(local_deployment, tmp_path):
    dep, db_url = local_deployment.dep, local_deployment.url
    draft = tmp_path / "draft.yaml"
    draft.write_text(CAMPAIGN.read_text().replace("status: active\n", ""))
    import_suppressions(db_url, DNC)
    import_leads(db_url, draft, MAILBOXES, LEADS)
    change_status(db_url, KEY, "submit", "alice", "ready for launch")
    token = dep.token()
    dags = wait_for(lambda: (d := {x["dag_id"]: x for x in dep.api("GET", "/dags?limit=100", token)["dags"]})
                    .keys() >= {DAG, "outreach_queue_due"} and d, 180, "the DAGs to be parsed")
    assert dags[DAG]["is_paused"] is False  # nobody has to find and unpause it
    dep.api("PATCH", "/dags/outreach_queue_due", token, json={"is_paused": False})

    # A run as the schedule starts it (no campaign named): it finds the submitted campaign.
    run_id = trigger(dep, token, DAG)
    _answer(dep, token, run_id, "reject", "subject too pushy")
    assert wait_run(dep, token, DAG, run_id)["state"] == "success"
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "draft"
    assert rows(db_url, "SELECT event, actor, reason FROM outreach.campaign_events "
                        "ORDER BY id DESC LIMIT 1") == [
        {"event": "rejected", "actor": "admin", "reason": "subject too pushy"}]
    # The same submission is not listed twice: a second run finds nothing to ask.
    again = trigger(dep, token, DAG)
    assert wait_run(dep, token, DAG, again)["state"] == "success"
    assert {t["task_id"]: t["state"] for t in task_instances(dep, token, DAG, again)}["decide"] \
        == "skipped"

    change_status(db_url, KEY, "submit", "alice", "subject fixed")
    run_id = trigger(dep, token, DAG)
    answer = _answer(dep, token, run_id, "approve", "looks right")
    assert answer["responded_by"]["name"] == "admin"
    assert wait_run(dep, token, DAG, run_id)["state"] == "success"
    [campaign] = rows(db_url, "SELECT status, approved_by, approved_at, content_version, "
                              "approved_content_version FROM outreach.campaigns")
    assert (campaign["status"], campaign["approved_by"]) == ("active", "admin")
    assert campaign["approved_content_version"] == campaign["content_version"]
    answered = dt.datetime.fromisoformat(answer["responded_at"])
    assert abs(campaign["approved_at"] - answered) < dt.timedelta(seconds=1)

    # The next queue-due queues the campaign's steps (rows in PostgreSQL).
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 0
    queue_run = trigger(dep, token, "outreach_queue_due")
    assert wait_run(dep, token, "outreach_queue_due", queue_run)["state"] == "success"
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'") \
        == EXPECTED_LEADS
