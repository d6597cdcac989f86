"""The warehouse export (issue 26, item 3; outreach.export, migration 0131): the event log copied to
a second real PostgreSQL database through an Airflow SQL connection (common-sql's hook), and to
JSON-lines files through ObjectStoragePath (file://), exactly once — run twice, killed between
writing a batch and moving the cursor (SIGKILL at failpoint ``export_after_write``), or while a
transaction holding a lower event id was still open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from outreach.airflow.tasks_export import export_task, file_export_target, sql_export_target
from outreach.export import export
from support.flow import rows
from support.inboxflow import sent_campaign
from support.warehouse import WAREHOUSE_CONN_ID


def add_events(db_url: str, n: int, kind: str = "campaign_paused") -> list[int]:
    """Append ``n`` events, each in its own transaction; return their ids."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [conn.execute("INSERT INTO outreach.events (kind) VALUES (%s) RETURNING id",
                             (kind,)).fetchone()[0] for _ in range(n)]


def all_ids(db_url: str) -> list[int]:
    return sorted(r["id"] for r in rows(db_url, "SELECT id FROM outreach.events"))


def warehouse_ids(warehouse_url: str) -> list[int]:
    return sorted(r["event_id"] for r in rows(warehouse_url,
                                               "SELECT event_id FROM outreach_events"))


def file_ids(folder: Path) -> list[int]:
    """Every event id in every file of the folder, with repeats (a second copy shows twice)."""
    return sorted(json.loads(line)["event_id"] for f in folder.glob("*.jsonl")
                  for line in f.read_text().splitlines())


def sql_target():
    return sql_export_target(WAREHOUSE_CONN_ID, "warehouse")


def files_target(folder: Path):
    return file_export_target(folder.as_uri(), "files")


def test_export_run_twice_copies_each_event_once(db_url, warehouse_url, tmp_path, sink, settings,
                                                 monkeypatch):
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)  # what the DAG's tasks read
    sent = sent_campaign(db_url, tmp_path, settings, ["a@wh.example", "b@wh.example"])
    replied = sent["a@wh.example"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id)"
                     " SELECT 'replied', campaign_id, lead_id, id FROM outreach.emails"
                     " WHERE id = %s", (replied["email_id"],))
    add_events(db_url, 17)
    folder = tmp_path / "lake"
    for _ in range(2):
        export_task("sql", {"conn_id": WAREHOUSE_CONN_ID, "batch_size": 4})
        export_task("files", {"path": folder.as_uri(), "batch_size": 4})

    expected = all_ids(db_url)
    assert warehouse_ids(warehouse_url) == expected
    assert file_ids(folder) == expected
    assert len(list(folder.glob("*.jsonl"))) == -(-len(expected) // 4)  # batches of 4
    # The read model: one row per email, each time the event's.
    timeline = {r["email_id"]: r for r in rows(warehouse_url,
                                               "SELECT * FROM outreach_email_timeline")}
    events = {(r["email_id"], r["kind"]): r["occurred_at"] for r in rows(
        db_url, "SELECT email_id, kind, occurred_at FROM outreach.events WHERE email_id IS NOT NULL")}
    assert set(timeline) == {s["email_id"] for s in sent.values()}
    for s in sent.values():
        row = timeline[s["email_id"]]
        assert row["sent_at"] == events[(s["email_id"], "sent")]
        assert row["lead_id"] == s["lead_id"]
        assert row["replied_at"] == events.get((s["email_id"], "replied"))
    assert timeline[replied["email_id"]]["replied_at"] is not None
    cursors = rows(db_url, "SELECT target, exported, planned_id FROM outreach.export_cursors"
                           " ORDER BY target")
    assert cursors == [{"target": "files", "exported": len(expected), "planned_id": None},
                       {"target": "warehouse", "exported": len(expected), "planned_id": None}]
    # No address leaves: the rows name ids.
    assert "@" not in json.dumps([r["payload"] for r in rows(warehouse_url,
                                                             "SELECT payload FROM outreach_events")])


KILLED_EXPORT = """
import sys
from outreach.airflow.tasks_export import file_export_target, sql_export_target
from outreach.export import export
kind, url, where = sys.argv[1:4]
target = sql_export_target(where, "warehouse") if kind == "sql" else file_export_target(where, "files")
export(url, target, batch=5)
"""


@pytest.mark.parametrize("kind", ["sql", "files"])
def test_export_killed_after_writing_resumes_without_gap_or_copy(db_url, warehouse_url,
                                                                 tmp_path, kind):
    add_events(db_url, 23)
    folder = tmp_path / "lake"
    where = WAREHOUSE_CONN_ID if kind == "sql" else folder.as_uri()
    # Killed after writing the 2nd batch (events 6-10), before its cursor moved.
    proc = subprocess.run([sys.executable, "-c", KILLED_EXPORT, kind, db_url, where],
                          env={**os.environ, "OUTREACH_FAILPOINTS": "export_after_write:2"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-3000:]
    cursor = rows(db_url, "SELECT exported, planned_id FROM outreach.export_cursors")[0]
    assert cursor["exported"] == 5 and cursor["planned_id"] is not None, cursor
    add_events(db_url, 4)  # new events while it was down

    result = export(db_url, sql_target() if kind == "sql" else files_target(folder), batch=5)

    assert result.resumed
    got = warehouse_ids(warehouse_url) if kind == "sql" else file_ids(folder)
    assert got == all_ids(db_url)  # sorted with repeats: no gap, no second copy
    assert rows(db_url, "SELECT exported FROM outreach.export_cursors")[0]["exported"] == 27


def test_event_of_a_transaction_open_during_an_export_is_exported_by_the_next(
        db_url, warehouse_url, tmp_path):
    add_events(db_url, 3)
    with psycopg.connect(db_url) as slow:  # takes the lower id, commits after the export ran
        low = slow.execute("INSERT INTO outreach.events (kind) VALUES ('campaign_paused')"
                           " RETURNING id").fetchone()[0]
        high = add_events(db_url, 2)  # higher ids, committed first
        assert low < min(high)
        export(db_url, sql_target(), batch=100)
        assert low not in warehouse_ids(warehouse_url)
        slow.commit()
    export(db_url, sql_target(), batch=100)
    assert warehouse_ids(warehouse_url) == all_ids(db_url)
    assert low in warehouse_ids(warehouse_url)


class HeldTarget:
    """A file target whose first write waits until released: a run stuck mid-batch."""

    def __init__(self, inner, started, release) -> None:
        self.name, self.inner = inner.name, inner
        self.started, self.release, self.held = started, release, False

    def write(self, events) -> None:
        if not self.held:
            self.held = True
            self.started.set()
            assert self.release.wait(60)
        self.inner.write(events)


def test_two_overlapping_exports_write_each_event_once_and_count_it_once(db_url, tmp_path):
    import threading

    add_events(db_url, 11)
    folder = tmp_path / "lake"
    started, release = threading.Event(), threading.Event()
    slow = threading.Thread(target=export, args=(db_url, HeldTarget(files_target(folder), started,
                                                                    release)),
                            kwargs={"batch": 4})
    slow.start()
    assert started.wait(60)  # the slow run planned its first batch and is writing it
    fast = export(db_url, files_target(folder), batch=4)  # replays that batch, goes to the end
    release.set()
    slow.join(60)

    assert fast.resumed and fast.events == 11
    assert file_ids(folder) == all_ids(db_url)
    cursor = rows(db_url, "SELECT exported, planned_id FROM outreach.export_cursors")
    assert cursor == [{"exported": 11, "planned_id": None}]  # the slow run's advance lost the race


def test_batches_follow_transaction_ids_as_numbers_not_text(db_url, tmp_path):
    # Seen once in a long session: xids crossing 999 -> 1000 sorted as text lost events.
    with psycopg.connect(db_url, autocommit=True) as conn:
        first = conn.execute("INSERT INTO outreach.events (kind, xact) VALUES ('campaign_paused',"
                             " '10') RETURNING id").fetchone()[0]
        second = conn.execute("INSERT INTO outreach.events (kind, xact) VALUES"
                              " ('campaign_paused', '9') RETURNING id").fetchone()[0]
    folder = tmp_path / "lake"
    export(db_url, files_target(folder), batch=1)
    assert file_ids(folder) == sorted([first, second])
