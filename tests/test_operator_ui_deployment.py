"""What an operator sees in the real Airflow deployment (api-server, scheduler, dag-processor,
triggerer; LocalExecutor, PostgreSQL metadata): with the mailboxes' SMTP server down the send
tasks fail and one alert reaches the ops mailbox; clearing them with the server back sends each
email once; new unconfirmed emails open a Required Action that, answered through the REST API
(as the UI does), resolves exactly the listed rows, recorded with the Airflow user."""

from __future__ import annotations

import datetime as dt

import pytest

from flow import import_demo, rows
from outreach import db
from outreach.devsmtp import MaildirServer
from outreach.queue import queue_due, reap
from outreach.send import claim
from test_deployment import (BASE_ENV, accepted_once, clear_and_wait, run_and_wait,
                             running_deployment, send_tis, task_instances, wait_for)
from test_operator_alerts import OPS, subject_of

pytestmark = pytest.mark.airflow


def test_failures_turn_red_alert_once_and_required_actions_resolve_listed_rows(
        pg_admin_url, db_url, tmp_path):
    import_demo(db_url)
    assert queue_due(db_url)["queued"] == 196
    relay = MaildirServer(tmp_path / "relay")  # not started yet: the mailboxes' SMTP is down
    relay_up = False
    alerts = MaildirServer(tmp_path / "alerts").start()
    env = {**BASE_ENV, "OUTREACH_PREFLIGHT": "off",
           **{f"AIRFLOW_CONN_OUTREACH_SMTP_{n}": relay.connection_json(timeout=10) for n in ("ANNA", "BEN", "HELLO")},
           "AIRFLOW_CONN_OUTREACH_ALERTS": alerts.connection_json(),
           "OUTREACH_ALERT_TO": OPS, "OUTREACH_ALERT_FROM": "outreach@outreach-test.example"}
    try:
        with running_deployment(pg_admin_url, db_url, tmp_path, env) as dep:
            token = dep.token()
            wanted = {"outreach_send", "outreach_unconfirmed_review"}
            wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", token)["dags"]} >= wanted,
                     180, "the dag-processor to parse the DAGs")
            for dag_id in wanted:
                dep.api("PATCH", f"/dags/{dag_id}", token, json={"is_paused": False})

            # SMTP down: the send tasks fail (red), the run fails, one alert for the run.
            run = run_and_wait(dep, token, "outreach_send")
            assert run["state"] == "failed"
            failed = [t for t in send_tis(dep, token, run["dag_run_id"]) if t["state"] == "failed"]
            assert failed
            assert all("@" not in (t["rendered_map_index"] or "") for t in failed)
            assert any("anna — sales" in (t["rendered_map_index"] or "") for t in failed)
            run_alerts = [m for m in alerts.messages() if "run failed" in subject_of(m)]
            assert len(run_alerts) == 1 and run_alerts[0]["To"] == OPS
            assert rows(db_url, "SELECT count(*) AS n FROM outreach.send_log")[0]["n"] == 0

            # The server is back: clearing the failed tasks sends each email once.
            relay.start()
            relay_up = True
            rerun = clear_and_wait(dep, token, run["dag_run_id"], failed, only_failed=True)
            assert rerun["state"] == "success"
            messages = relay.messages()
            accepted_once(messages)
            assert len(messages) == rows(db_url, "SELECT count(*) AS n FROM outreach.send_log")[0]["n"] > 0
            summary = next(t for t in task_instances(dep, token, "outreach_send", run["dag_run_id"])
                           if t["task_id"] == "summary")
            assert summary["state"] == "success"
            assert len([m for m in alerts.messages() if "run failed" in subject_of(m)]) == 1

            # Two emails left unconfirmed by a vanished sender; the next send run flags them, the
            # review DAG opens a Required Action listing exactly them.
            conn = db.connect(db_url, autocommit=True)
            held = sorted(r["id"] for r in claim(conn, 1, 2, worker="lost-worker")[0])
            conn.close()
            later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=31)
            assert sorted(reap(db_url, dt.timedelta(minutes=30), now=later)) == held
            assert run_and_wait(dep, token, "outreach_send")["state"] == "success"

            def awaiting():
                for r in dep.api("GET", "/dags/outreach_unconfirmed_review/dagRuns", token)["dag_runs"]:
                    for t in task_instances(dep, token, "outreach_unconfirmed_review", r["dag_run_id"]):
                        if t["task_id"] == "decide" and t["state"] == "awaiting_input":
                            return r["dag_run_id"]
                return None

            review_run = wait_for(awaiting, 240, "the Required Action to open")
            path = (f"/dags/outreach_unconfirmed_review/dagRuns/{review_run}/taskInstances/decide/-1"
                    "/hitlDetails")
            detail = dep.api("GET", path, token)
            assert detail["options"] == ["was sent", "not sent, requeue", "leave for later"]
            assert not detail["defaults"]
            for i in held:
                assert f"| {i} | q4\\-ops\\-intro | 1 |" in detail["body"]
            assert "anna.schmidt@" not in detail["body"]
            answer = dep.api("PATCH", path, token, json={"chosen_options": ["not sent, requeue"]})
            assert answer["responded_by"]["name"] == "admin"
            done = wait_for(lambda: (r := dep.api("GET", f"/dags/outreach_unconfirmed_review/dagRuns/"
                                                  f"{review_run}", token))["state"] in {"success", "failed"} and r,
                            180, "the review run to finish")
            assert done["state"] == "success"
            assert rows(db_url, "SELECT email_id, decision, resolved_by FROM outreach.email_resolutions"
                                " ORDER BY email_id") == [
                {"email_id": i, "decision": "not_sent", "resolved_by": "admin"} for i in held]
            assert rows(db_url, "SELECT count(*) AS n FROM outreach.emails WHERE failure_kind = "
                                "'unconfirmed'")[0]["n"] == 0
            unconfirmed_alerts = [m for m in alerts.messages() if "unconfirmed" in subject_of(m)]
            assert len(unconfirmed_alerts) == 1
    finally:
        alerts.stop()
        if relay_up:
            relay.stop()
