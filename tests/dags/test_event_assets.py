"""Issue 26, item 2: the inbox DAG, run by real Airflow (``airflow dags test``) against a real
Dovecot, updates ``outreach://events/replies`` with the id range of the new reply event in the
asset event's extra, and no Asset of a family without new events; a second run with nothing new
records no asset event at all.

Issue 29: the send DAG updates the unconfirmed asset from ``after_send`` through an AssetAlias,
only while unconfirmed emails wait for a Required Action, and Airflow queues the review DAG
scheduled on that asset for it (``asset_dag_run_queue``), as for a plain outlet."""

from __future__ import annotations

import json
import sqlite3

import pytest

from outreach.queue import queue_due
from support.airflowhome import env_for, fresh_home, run_asset_events
from support.flow import import_demo, leave_unconfirmed, outreach, rows
from support.inboxflow import replied_campaign

pytestmark = pytest.mark.airflow


def asset_events(home) -> list[tuple]:
    with sqlite3.connect(home / "airflow.db") as meta:
        return [(uri, dag, task, json.loads(extra)) for uri, dag, task, extra in meta.execute(
            "SELECT a.uri, e.source_dag_id, e.source_task_id, e.extra FROM asset_event e "
            "JOIN asset a ON a.id = e.asset_id ORDER BY e.id")]


def test_a_reply_updates_the_replies_asset_with_its_event_id(
        db_url, sink, settings, tmp_path, imap_accounts, migrated_airflow_home, shared_airflow):
    replied_campaign(db_url, tmp_path, settings, imap_accounts, "rita@reply.example", "Yes, let's talk on Tuesday.")
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    env.update(imap_accounts.env())

    first = shared_airflow.run_dag(env, "outreach_inbox", tmp_path / "first.log")
    assert first.ok, first.log.read_text()[-4000:]
    [reply] = rows(db_url, "SELECT id FROM outreach.events WHERE kind = 'replied'")
    assert run_asset_events(first) == [
        ("outreach://events/replies", "announce",
         {"first_id": reply["id"], "last_id": reply["id"], "count": 1, "kinds": ["replied"]})]

    second = shared_airflow.run_dag(env, "outreach_inbox", tmp_path / "second.log")
    assert second.ok, second.log.read_text()[-4000:]
    assert second.run_id != first.run_id
    assert run_asset_events(second) == []  # nothing new: no asset event
    assert "rita@reply.example" not in first.log.read_text()


def queued_dags(home) -> list[tuple]:
    """The DAG runs Airflow queued for asset events: (asset URI, target DAG id)."""
    with sqlite3.connect(home / "airflow.db") as meta:
        return list(meta.execute(
            "SELECT a.uri, q.target_dag_id FROM asset_dag_run_queue q JOIN asset a"
            " ON a.id = q.asset_id ORDER BY a.uri"))


def task_states(home, dag_id: str) -> dict[str, set[str]]:
    with sqlite3.connect(home / "airflow.db") as meta:
        out: dict[str, set[str]] = {}
        for task_id, state in meta.execute(
                "SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)):
            out.setdefault(task_id, set()).add(state)
        return out


def test_unconfirmed_emails_queue_the_review_through_the_alias_and_only_then(
        db_url, sink, tmp_path, migrated_airflow_home, dag_session):
    import_demo(db_url)
    queue_due(db_url)
    held = leave_unconfirmed(db_url, 2)  # a sender lost during the handoffs
    home = fresh_home(migrated_airflow_home, tmp_path, "home")
    env = env_for(home, db_url, sink)
    # Every DAG in the metadata database, as the dag-processor stores them: the review DAG
    # (never paused on creation) with its schedule on the unconfirmed asset.
    # The reserialize and both runs in one Airflow process of this home (the review DAG's queue
    # is read here).
    airflow = dag_session(env)
    stored = airflow.run_command(["dags", "reserialize"], tmp_path / "reserialize.log")
    assert stored == 0, (tmp_path / "reserialize.log").read_text()[-3000:]

    first = airflow.run_dag("outreach_send", tmp_path / "first.log")
    log = first.log.read_text()
    assert first.ok, log[-4000:]
    assert task_states(home, "outreach_send") == {
        "plan": {"success"}, "send_batch": {"success"}, "summary": {"success"},
        "after_send": {"success"}}
    assert log.index("preflight: ") < log.index("plan: ")  # the preflight's lines, in plan
    # The asset's URI as Airflow stores it (normalized: a trailing slash after the host).
    unconfirmed = [e for e in asset_events(home) if e[0] == "outreach://unconfirmed/"]
    assert unconfirmed == [("outreach://unconfirmed/", "outreach_send", "after_send",
                            {"unlisted": held})]
    assert {e[0] for e in asset_events(home)} >= {"outreach://events/sent"}
    assert queued_dags(home) == [("outreach://unconfirmed/", "outreach_unconfirmed_review")]

    # Resolved: nothing for a Required Action, so no asset event (the task still succeeds).
    resolved = outreach(db_url, "resolve", "--ids", ",".join(map(str, held)),
                        "--decision", "was-sent", "--by", "test")
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    second = airflow.run_dag("outreach_send", tmp_path / "second.log")
    assert second.ok, second.log.read_text()[-4000:]
    assert [e for e in asset_events(home) if e[0] == "outreach://unconfirmed/"] == unconfirmed
    assert "Asset outreach_unconfirmed not updated" in second.log.read_text()
