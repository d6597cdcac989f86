"""The event Assets' collect (outreach.eventassets.collect, what ``after_send`` and the inbox DAG
announce from) when the database goes away after the cursor moved over a batch: what was passed
is announced, the rest by the next run, so no event is left unannounced."""

from __future__ import annotations

import psycopg
import pytest

from outreach import eventassets
from outreach.db import OutreachDBError
from support.tcpcut import cut_after


def add_sent_events(db_url: str, n: int) -> list[int]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [conn.execute("INSERT INTO outreach.events (kind) VALUES ('sent') RETURNING id"
                             ).fetchone()[0] for _ in range(n)]


def test_a_drop_after_the_first_batch_announces_it_and_the_next_run_the_rest(db_url, monkeypatch):
    ids = add_sent_events(db_url, 5)
    monkeypatch.setattr(eventassets, "BATCH", 2)
    # Connections of one collect: ensure the cursor, read and plan batch 1, move past it; the 4th
    # (batch 2's read) finds the database gone.
    with cut_after(db_url, 3) as url:
        first = eventassets.collect(url, "send")
    assert first == {"sent": {"first_id": ids[0], "last_id": ids[1], "count": 2,
                              "kinds": ["sent"]}}
    second = eventassets.collect(db_url, "send")
    assert second == {"sent": {"first_id": ids[2], "last_id": ids[4], "count": 3,
                               "kinds": ["sent"]}}


def test_a_drop_before_any_batch_still_fails_and_the_retry_announces_all(db_url, monkeypatch):
    ids = add_sent_events(db_url, 3)
    monkeypatch.setattr(eventassets, "BATCH", 2)
    with cut_after(db_url, 1) as url, pytest.raises((OutreachDBError, psycopg.OperationalError)):
        eventassets.collect(url, "send")
    assert eventassets.collect(db_url, "send") == {
        "sent": {"first_id": ids[0], "last_id": ids[2], "count": 3, "kinds": ["sent"]}}
