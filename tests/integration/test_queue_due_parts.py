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
