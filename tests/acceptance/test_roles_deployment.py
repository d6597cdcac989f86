"""Who may do what, in the real deployment (api-server, scheduler, dag-processor, triggerer;
LocalExecutor, PostgreSQL metadata) with Airflow's FAB auth manager and the roles of
``outreach roles sync`` (issue 27): an analyst's REST calls to trigger ``outreach_unsuppress`` or
to clear a send task are refused (403) and change nothing; an operator may clear the send task
but not trigger the admin-only DAG; an admin's unsuppress runs and removes the suppression. The
campaign page answers the analyst, and sends an anonymous browser to the login page."""

from __future__ import annotations

import httpx
import pytest

from outreach.airflow.roles import ANALYST, OPERATOR
from outreach.queue import queue_due
from support.deployment import (
    add_user,
    run_and_wait,
    send_tis,
    task_instances,
    wait_for,
)
from support.flow import import_demo, rows

pytestmark = pytest.mark.airflow

UNSUPPRESS = "outreach_unsuppress"


def call(dep, method: str, path: str, token: str, **kw) -> httpx.Response:
    """One REST call (``/api/v2`` + path) as the holder of ``token``; the answer, whatever it is."""
    return httpx.request(method, f"{dep.base_url}/api/v2{path}", timeout=60,
                         headers={"Authorization": f"Bearer {token}"}, **kw)


def clear_body(run_id: str, tis: list[dict]) -> dict:
    return {"dag_run_id": run_id, "task_ids": [["send_batch", t["map_index"]] for t in tis],
            "only_failed": False, "dry_run": False, "reset_dag_runs": True,
            "include_downstream": True}


def test_analyst_is_refused_operator_clears_and_admin_unsuppresses(local_deployment):
    dep, db_url = local_deployment.dep, local_deployment.url
    import_demo(db_url)
    assert queue_due(db_url)["queued"] > 0
    suppressed = rows(db_url, "SELECT value FROM outreach.suppressions WHERE kind = 'address' "
                              "ORDER BY id LIMIT 1")[0]["value"]
    admin = dep.token()
    wanted = {"outreach_send", UNSUPPRESS}
    wait_for(lambda: {d["dag_id"] for d in dep.api("GET", "/dags", admin)["dags"]} >= wanted,
             180, "the dag-processor to parse the DAGs")
    for dag_id in wanted:
        dep.api("PATCH", f"/dags/{dag_id}", admin, json={"is_paused": False})
    analyst = dep.token("ann", add_user(dep, admin, "ann", ANALYST))
    operator = dep.token("otto", add_user(dep, admin, "otto", OPERATOR))

    run = run_and_wait(dep, admin, "outreach_send")
    assert run["state"] == "success"
    run_id = run["dag_run_id"]
    tis = send_tis(dep, admin, run_id)
    assert tis
    tries = {t["map_index"]: t["try_number"] for t in tis}
    conf = {"conf": {"value": suppressed, "why": "asked to be contacted again (ticket 4711)",
                     "requested_by": "test"}, "logical_date": None}

    # The analyst reads the DAGs, the run, its task instances and the campaign page …
    assert call(dep, "GET", f"/dags/outreach_send/dagRuns/{run_id}", analyst).status_code == 200
    assert call(dep, "GET", f"/dags/outreach_send/dagRuns/{run_id}/taskInstances",
                analyst).status_code == 200
    page = httpx.get(f"{dep.base_url}/outreach-campaigns/report.json", timeout=60,
                     headers={"Authorization": f"Bearer {analyst}"})
    assert page.status_code == 200, page.text
    # … and may trigger, clear and pause nothing.
    assert call(dep, "POST", f"/dags/{UNSUPPRESS}/dagRuns", analyst, json=conf).status_code == 403
    assert call(dep, "POST", "/dags/outreach_send/clearTaskInstances", analyst,
                json=clear_body(run_id, tis)).status_code == 403
    assert call(dep, "PATCH", "/dags/outreach_send", analyst,
                json={"is_paused": True}).status_code == 403
    # The operator runs the sender but may not unsuppress.
    assert call(dep, "POST", f"/dags/{UNSUPPRESS}/dagRuns", operator, json=conf).status_code == 403
    # Nothing changed: no unsuppress run, the same tries, the suppression still there.
    assert dep.api("GET", f"/dags/{UNSUPPRESS}/dagRuns", admin)["total_entries"] == 0
    assert {t["map_index"]: t["try_number"] for t in send_tis(dep, admin, run_id)} == tries
    assert not dep.api("GET", "/dags/outreach_send", admin)["is_paused"]
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.suppressions WHERE value = %s",
                (suppressed,))[0]["n"] == 1

    # The operator's clear runs the send tasks again.
    cleared = call(dep, "POST", "/dags/outreach_send/clearTaskInstances", operator,
                   json=clear_body(run_id, tis))
    assert cleared.status_code == 200, cleared.text
    wait_for(lambda: all(t["try_number"] > tries[t["map_index"]] and t["state"] in
                         {"success", "failed"}
                         for t in send_tis(dep, admin, run_id)), 300,
             "the cleared send tasks to run again")

    # An admin's unsuppress runs, removes the suppression and leaves an audit row with
    # the admin's Airflow user name (not the name typed in the form).
    ada = dep.token("ada", add_user(dep, admin, "ada", "Admin"))
    r = call(dep, "POST", f"/dags/{UNSUPPRESS}/dagRuns", ada, json=conf)
    assert r.status_code == 200, r.text
    unsuppress_run = r.json()["dag_run_id"]
    done = wait_for(lambda: (x := dep.api("GET", f"/dags/{UNSUPPRESS}/dagRuns/{unsuppress_run}",
                                          admin))["state"] in {"success", "failed"} and x,
                    180, "the unsuppress run")
    assert done["state"] == "success", task_instances(dep, admin, UNSUPPRESS, unsuppress_run)
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.suppressions WHERE value = %s",
                (suppressed,))[0]["n"] == 0
    audit = rows(db_url, "SELECT actor, via, action, dag_id, run_id FROM outreach.audit_log"
                         " WHERE action = 'unsuppress'")
    assert audit == [{"actor": "ada", "via": "airflow", "action": "unsuppress",
                      "dag_id": UNSUPPRESS, "run_id": unsuppress_run}], audit

    # An anonymous browser is sent to the login page, not given a bare 401.
    anon = httpx.get(f"{dep.base_url}/outreach-campaigns/", timeout=60,
                     headers={"Accept": "text/html"}, follow_redirects=True)
    assert anon.status_code == 200 and "/auth/login/" in str(anon.url), anon.url
