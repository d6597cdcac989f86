"""Issue 26, item 2: the inbox DAG, run by real Airflow (``airflow dags test``) against a real
Dovecot, updates ``outreach://events/replies`` with the id range of the new reply event in the
asset event's extra, and no Asset of a family without new events; a second run with nothing new
records no asset event at all."""

from __future__ import annotations

import json
import sqlite3

import pytest

from outreach.dev.localairflow import run_dag
from support.airflowhome import env_for, fresh_home
from support.flow import rows
from support.inboxflow import replied_campaign

pytestmark = pytest.mark.airflow


def asset_events(home) -> list[tuple]:
    with sqlite3.connect(home / "airflow.db") as meta:
        return [(uri, dag, task, json.loads(extra)) for uri, dag, task, extra in meta.execute(
            "SELECT a.uri, e.source_dag_id, e.source_task_id, e.extra FROM asset_event e "
            "JOIN asset a ON a.id = e.asset_id ORDER BY e.id")]


def test_a_reply_updates_the_replies_asset_with_its_event_id(
        db_url, sink, settings, tmp_path, imap_accounts, migrated_airflow_home):
    replied_campaign(db_url, tmp_path, settings, imap_accounts, "rita@reply.example", "Yes, let's talk on Tuesday.")
    home = fresh_home(migrated_airflow_home, tmp_path, "home")
    env = env_for(home, db_url, sink)
    env.update(imap_accounts.env())

    first = run_dag(env, "outreach_inbox", tmp_path / "first.log")
    assert first.ok, first.log.read_text()[-4000:]
    [reply] = rows(db_url, "SELECT id FROM outreach.events WHERE kind = 'replied'")
    assert asset_events(home) == [
        ("outreach://events/replies", "outreach_inbox", "announce",
         {"first_id": reply["id"], "last_id": reply["id"], "count": 1, "kinds": ["replied"]})]

    second = run_dag(env, "outreach_inbox", tmp_path / "second.log")
    assert second.ok, second.log.read_text()[-4000:]
    assert len(asset_events(home)) == 1  # nothing new: no asset event
    assert "rita@reply.example" not in first.log.read_text()
