"""The event Assets' collect (outreach.eventassets.collect, what ``after_send`` and the inbox DAG
announce from) when the database goes away or turns read-only after the cursor moved over a
batch: what was passed is announced, the rest by the next run, so no event is left unannounced;
two collects at once announce each event once. Partly found by an attack (h-attack3)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from outreach import eventassets
from outreach.db import OutreachDBError
from support.tcpcut import cut_after


def add_sent_events(db_url: str, n: int) -> list[int]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [conn.execute("INSERT INTO outreach.events (kind) VALUES ('sent') RETURNING id"
                             ).fetchone()[0] for _ in range(n)]


def announced(extra: dict) -> tuple[int, int, int] | None:
    r = extra.get("sent")
    return (r["first_id"], r["last_id"], r["count"]) if r else None


def test_a_drop_after_the_first_batch_announces_it_and_the_next_run_the_rest(db_url, monkeypatch):
    ids = add_sent_events(db_url, 5)
    monkeypatch.setattr(eventassets, "BATCH", 2)
    # Connections of one collect: hold the cursor's lock, ensure the cursor, read and plan batch 1,
    # move past it; the 5th (batch 2's read) finds the database gone.
    with cut_after(db_url, 4) as url:
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


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_a_drop_at_any_connection_never_leaves_an_event_unannounced(db_url, monkeypatch, n):
    """Connections: 1 lock, 2 ensure, 3 read b1, 4 advance b1, 5 read b2, 6 advance b2 and so on."""
    ids = add_sent_events(db_url, 5)
    monkeypatch.setattr(eventassets, "BATCH", 2)
    seen: list[tuple[int, int, int]] = []
    for attempt in range(5):
        try:
            with cut_after(db_url, n if attempt == 0 else 1000) as url:
                got = eventassets.collect(url, "send")
        except (OutreachDBError, psycopg.OperationalError):
            continue
        if got:
            seen.append(announced(got))
    covered = set()
    for first, last, _ in seen:
        covered |= {i for i in ids if first <= i <= last}
    assert covered == set(ids), (n, seen)


def test_a_database_turned_read_only_after_a_moved_batch_announces_it(db_url, monkeypatch):
    """A failover to a read-only server (or default_transaction_read_only) after batch 1's cursor
    moved: the plan/advance UPDATE raises psycopg.errors.ReadOnlySqlTransaction (an InternalError,
    neither OutreachDBError nor OperationalError), collect re-raises, the task fails, and the retry
    starts after batch 1: batch 1 is never announced."""
    ids = add_sent_events(db_url, 5)
    monkeypatch.setattr(eventassets, "BATCH", 2)
    dbname = conninfo_to_dict(db_url)["dbname"]
    writes = 0
    original = eventassets._Collect.write

    def write(self, events):
        nonlocal writes
        original(self, events)
        writes += 1
        if writes == 2:  # batch 1 advanced, batch 2 planned: the server turns read-only
            with psycopg.connect(db_url, autocommit=True) as c:
                c.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on')

    monkeypatch.setattr(eventassets._Collect, "write", write)
    announcements = []
    try:
        announcements.append(eventassets.collect(db_url, "send"))
    except Exception:  # noqa: BLE001 - the task fails; Airflow retries it
        pass
    monkeypatch.setattr(eventassets._Collect, "write", original)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("SET default_transaction_read_only = off")  # this session may write again
        c.execute(f'ALTER DATABASE "{dbname}" RESET default_transaction_read_only')
    announcements.append(eventassets.collect(db_url, "send"))
    covered = {i for a in announcements for i in ids
               if a.get("sent") and a["sent"]["first_id"] <= i <= a["sent"]["last_id"]}
    assert covered == set(ids), f"never announced: {sorted(set(ids) - covered)}"


def test_two_collects_at_once_announce_each_event_once(db_url, monkeypatch):
    ids = add_sent_events(db_url, 40)
    monkeypatch.setattr(eventassets, "BATCH", 3)
    results: list = [None, None]
    barrier = threading.Barrier(2)

    def run(i):
        barrier.wait()
        try:
            results[i] = eventassets.collect(db_url, "send")
        except Exception as exc:  # noqa: BLE001
            results[i] = exc

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not any(isinstance(r, Exception) for r in results), results
    total = sum(r["sent"]["count"] for r in results if r)
    assert total == len(ids), f"announced {total} for {len(ids)} events: {results}"
