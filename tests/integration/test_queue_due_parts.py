"""queue_due in parts (issue 16, queue-due): the due leads are split by lead id, each part
queued by its own connection and transaction at once. Whatever the number of parts, the same
rows are queued once each; a part that fails is rolled back alone; two runs with different
numbers of parts at once neither deadlock nor queue a row twice (UNIQUE (lead, step))."""

from __future__ import annotations

import threading

import psycopg
import pytest

from outreach.queue import queue_due
from support.flow import import_demo, rows, scalar

DUE = """SELECT en.lead_id, st.id AS step_id, en.mailbox_id
         FROM outreach.enrollments en
         JOIN outreach.sequence_steps st ON st.campaign_id = en.campaign_id AND st.position = 1"""
QUEUED = "SELECT lead_id, step_id, mailbox_id FROM outreach.emails"


def _set(url: str, sql: str) -> set[tuple]:
    return {tuple(r.values()) for r in rows(url, sql)}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_number_of_parts_queues_each_due_step_once(db_url, workers):
    import_demo(db_url)
    first = queue_due(db_url, workers=workers)
    assert first["queued"] == 196 and first["per_mailbox"] == {1: 98, 2: 98}, first
    assert _set(db_url, QUEUED) == _set(db_url, DUE)
    assert queue_due(db_url, workers=4)["queued"] == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 196


def test_a_failing_part_is_rolled_back_alone_and_the_next_run_queues_the_rest(db_url):
    """A lead whose time zone PostgreSQL does not know fails its part (the send slot cannot be
    computed); the other part commits, and once the zone is fixed the next run queues the rest."""
    import_demo(db_url)
    bad = scalar(db_url, "SELECT min(id) FROM outreach.leads")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outreach.leads SET timezone = 'Mars/Olympus' WHERE id = %s", (bad,))
    with pytest.raises(psycopg.Error, match="Mars/Olympus"):
        queue_due(db_url, workers=2)
    queued = _set(db_url, QUEUED)
    assert queued and all(lead % 2 != bad % 2 for lead, _, _ in queued), sorted(queued)[:5]
    assert len(queued) == len({r for r in _set(db_url, DUE) if r[0] % 2 != bad % 2})
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outreach.leads SET timezone = NULL WHERE id = %s", (bad,))
    assert queue_due(db_url, workers=2)["queued"] == 196 - len(queued)
    assert _set(db_url, QUEUED) == _set(db_url, DUE)


def test_two_runs_with_different_parts_at_once_queue_each_step_once(db_url):
    """An overlapping Airflow run, or a changed OUTREACH_QUEUE_DUE_WORKERS: parts of both runs
    insert the same (lead, step) keys at once, each in (lead, step) order, so none waits on
    another in a cycle (a deadlock would raise here) and the unique key lets one row in."""
    import_demo(db_url)
    results: list[dict] = []
    errors: list[BaseException] = []

    def run(workers: int) -> None:
        try:
            results.append(queue_due(db_url, workers=workers))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in (2, 3, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(r["queued"] for r in results) == 196
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 196
    assert _set(db_url, QUEUED) == _set(db_url, DUE)


def test_every_failing_part_is_one_line_and_what_the_others_committed_is_logged(db_url, caplog):
    """Review (2026-12-01): with two parts failing, only the first part's error reached the task
    (the second was dropped unseen), and nothing said that the other parts had committed rows.
    Each failed part is now one line naming the part and the error, and one line says what the
    committed parts queued; the first part's error is raised."""
    import logging

    import_demo(db_url)
    ids = [r["id"] for r in rows(db_url, "SELECT id FROM outreach.leads ORDER BY id")]
    mars, venus = (next(i for i in ids if i % 3 == k) for k in (0, 1))
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outreach.leads SET timezone = 'Mars/Olympus' WHERE id = %s", (mars,))
        c.execute("UPDATE outreach.leads SET timezone = 'Venus/Maat' WHERE id = %s", (venus,))
    with caplog.at_level(logging.INFO, logger="outreach"), \
            pytest.raises(psycopg.Error, match="Mars/Olympus"):
        queue_due(db_url, workers=3)
    committed = scalar(db_url, "SELECT count(*) FROM outreach.emails")
    assert committed and scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE lead_id %% 3 <> 2") == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "outreach"]
    failed = [m for m in messages if "failed" in m and "part" in m]
    assert any("part 1/3" in m and "Mars/Olympus" in m for m in failed), messages
    assert any("part 2/3" in m and "Venus/Maat" in m for m in failed), messages
    assert all("\n" not in m for m in failed), failed
    assert any(f"queued={committed}" in m and "committed" in m for m in messages), messages


@pytest.mark.parametrize("workers", [0, 17, -1])
def test_a_number_of_parts_out_of_range_is_refused_like_the_setting(db_url, workers):
    """Review (2026-12-01): ``workers`` passed directly skipped OUTREACH_QUEUE_DUE_WORKERS's range
    (0 ended in ThreadPoolExecutor's ValueError, 17 ran 17 connections)."""
    from outreach.settings import SettingValueError

    with pytest.raises(SettingValueError, match=f"OUTREACH_QUEUE_DUE_WORKERS='{workers}'.*1 to 16"):
        queue_due(db_url, workers=workers)
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 0
