"""The Airflow side of issue 4, in a real Airflow process: the plugin mounts the unsubscribe
service in the Airflow API server app, and the send DAG runs its preflight in plan (issue 29:
plan, the mapped sends, summary and after_send, both after every send)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from outreach.dev.localairflow import airflow_env
from outreach.queue import queue_due
from outreach.tokens import make_token
from support.airflowhome import SETTINGS_ENV, fresh_home
from support.flow import import_demo, rows, scalar
from support.paths import ROOT

pytestmark = pytest.mark.airflow

PROBE = r"""
import json, socket, sys
import psycopg
saved = socket.socket.connect, socket.create_connection, psycopg.connect
def refuse(*a, **k):
    raise RuntimeError("network or database access while loading plugins or DAGs")
socket.socket.connect = socket.create_connection = psycopg.connect = refuse
from airflow import plugins_manager
from airflow.dag_processing.dagbag import DagBag
apps = [(a["name"], a["url_prefix"]) for a in plugins_manager.get_fastapi_plugins()[0]]
bag = DagBag(dag_folder=sys.argv[1])
send = bag.dags["outreach_send"]
order = {t.task_id: sorted(t.upstream_task_ids) for t in send.tasks}
rules = {t.task_id: getattr(t.trigger_rule, "value", t.trigger_rule) for t in send.tasks}
outlets = {t.task_id: sorted(f"{type(o).__name__} {o.name}" for o in t.outlets) for t in send.tasks}
socket.socket.connect, socket.create_connection, psycopg.connect = saved

from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app
with TestClient(create_app()) as client:
    path = "/outreach/unsubscribe/" + sys.argv[2]
    page = client.get(path)
    post = client.post(path, data={"List-Unsubscribe": "One-Click"}, follow_redirects=False)
    again = client.post(path, data={"List-Unsubscribe": "One-Click"}, follow_redirects=False)
    bad = client.post(path[:-2] + "xx", data={"List-Unsubscribe": "One-Click"})
    anonymous = [client.get(p).status_code for p in (
        "/outreach-campaigns/", "/outreach-campaigns/report.json",
        "/outreach-campaigns/static/chart.umd.min.js")]
    forged = client.get("/outreach-campaigns/", headers={"Authorization": "Bearer forged"}).status_code
views = [(v["name"], v["href"]) for v in plugins_manager._get_ui_plugins()[0]]
print("RESULT " + json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()}, "apps": apps, "order": order,
    "rules": rules, "outlets": outlets,
    "get": [page.status_code, "<form" in page.text], "post": post.status_code,
    "again": again.status_code, "cookie": post.headers.get("set-cookie"),
    "anonymous": anonymous, "forged": forged, "views": views,
    "location": post.headers.get("location"), "bad": bad.status_code}))
"""


def test_plugin_mounts_the_unsubscribe_service_in_the_api_server(db_url, migrated_airflow_home,
                                                                  tmp_path):
    import_demo(db_url)
    queue_due(db_url)
    email_id, address = rows(db_url, "SELECT e.id, l.email FROM outreach.emails e JOIN outreach.leads l"
                                     " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0].values()
    token = make_token(SETTINGS_ENV["OUTREACH_UNSUBSCRIBE_SECRET"], email_id)
    env = airflow_env(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, {},
                      {**SETTINGS_ENV, "AIRFLOW__API_AUTH__JWT_SECRET": "test-jwt-secret-only"})
    proc = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "dags"), token], env=env,
                          capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(line[len("RESULT "):])
    assert result["errors"] == {}
    assert result["apps"] == [["outreach-unsubscribe", "/outreach"],
                              ["outreach-campaigns", "/outreach-campaigns"]]
    # The campaign page is behind Airflow's login; the unsubscribe path answers without one.
    assert result["anonymous"] == [401, 401, 401] and result["forged"] in (401, 403)
    assert result["views"] == [["Campaigns", "/outreach-campaigns/"]]
    # The preflight runs in plan (its lines first in plan's log): one task less a run.
    assert result["order"] == {"plan": [], "send_batch": ["plan"], "summary": ["plan", "send_batch"],
                               "after_send": ["send_batch"]}
    assert {t: result["rules"][t] for t in ("summary", "after_send")} == {
        "summary": "all_done", "after_send": "all_done"}
    # The unconfirmed asset through an alias: an asset event only when a review is needed.
    assert result["outlets"]["after_send"] == ["AssetAlias outreach_events_send",
                                               "AssetAlias outreach_unconfirmed_flag"]
    assert result["get"] == [200, True]
    assert (result["post"], result["again"], result["bad"]) == (200, 200, 400)
    assert result["cookie"] is None and result["location"] is None
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions WHERE value = %s", (address,)) == 1
    assert scalar(db_url, "SELECT status::text FROM outreach.emails WHERE id = %s", (email_id,)) == "suppressed"
    assert "test-secret-0123456789" not in proc.stdout + proc.stderr
