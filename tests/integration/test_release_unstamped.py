"""Rows a dead sender claimed but never handed over come back within minutes (the short release,
``OUTREACH_RELEASE_SECONDS``), while rows it stamped keep the 30-minute unconfirmed rule; a live
sender's heartbeat keeps its claim; a stamp racing the reaper wins or loses as one row lock
decides, never both. Real PostgreSQL, an injected clock (no sleeping for the rule itself)."""

from __future__ import annotations

import datetime as dt
import threading
import time

from outreach import db
from outreach.claim import ClaimHeartbeat, claim
from outreach.leads import import_leads
from outreach.queue import Reaped, queue_due, reap
from outreach.store import emails
from support.flow import hand_over, leads_csv, rows
from support.paths import CAMPAIGN, MAILBOXES

T0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
MIN = dt.timedelta(minutes=1)
REAPER = dt.timedelta(minutes=30)
RELEASE = dt.timedelta(minutes=2)


def _claimed(url: str, tmp_path, n: int) -> list[dict]:
    import_leads(url, CAMPAIGN, MAILBOXES, leads_csv(
        tmp_path, [f"r{i}@release.example" for i in range(n)]), now=T0)
    assert queue_due(url, now=T0)["queued"] == n
    with db.connect(url, autocommit=True) as conn:
        held = claim(conn, 1, 100, worker="killed", now=T0)[0] + claim(
            conn, 2, 100, worker="killed", now=T0)[0]
    assert len(held) == n
    return held


def _status(url: str) -> dict[int, tuple[str, str | None]]:
    return {r["id"]: (r["status"], r["failure_kind"]) for r in rows(
        url, "SELECT id, status::text AS status, failure_kind FROM outreach.emails")}


def test_an_unstamped_claim_is_released_after_the_short_threshold_a_stamped_one_is_not(
        db_url, tmp_path):
    held = _claimed(db_url, tmp_path, 4)
    stamped, unstamped = held[:2], held[2:]
    hand_over(db_url, stamped, now=T0 + MIN)  # killed during its handoffs, 1 minute in

    assert reap(db_url, REAPER, release=RELEASE, now=T0 + 1.9 * MIN) == Reaped()
    early = reap(db_url, REAPER, release=RELEASE, now=T0 + 2.1 * MIN)
    assert sorted(early.requeued) == sorted(r["id"] for r in unstamped) and not early.unconfirmed
    state = _status(db_url)
    assert {state[r["id"]] for r in unstamped} == {("queued", None)}
    assert {state[r["id"]] for r in stamped} == {("sending", None)}
    # The stamped rows keep the 30-minute rule (from their stamp), however short the release.
    assert reap(db_url, REAPER, release=RELEASE, now=T0 + 30.9 * MIN) == Reaped()
    late = reap(db_url, REAPER, release=RELEASE, now=T0 + 31.1 * MIN)
    assert sorted(late.unconfirmed) == sorted(r["id"] for r in stamped) and not late.requeued
    assert "no sign of its sender for over 00:02:00" in rows(
        db_url, "SELECT last_error FROM outreach.emails WHERE id = %s",
        (unstamped[0]["id"],))[0]["last_error"]
    # Requeued with the attempt not counted and no heartbeat left behind.
    again = rows(db_url, "SELECT attempts, claim_heartbeat_at FROM outreach.emails WHERE id = ANY(%s)",
                 ([r["id"] for r in unstamped],))
    assert {(r["attempts"], r["claim_heartbeat_at"]) for r in again} == {(0, None)}


def test_a_live_senders_heartbeat_keeps_its_unstamped_rows(db_url, tmp_path):
    held = _claimed(db_url, tmp_path, 2)
    with db.connect(db_url, autocommit=True) as conn:
        for r in held:  # one claim per mailbox: each beats its own rows
            mine = [h["id"] for h in held if h["claim_token"] == r["claim_token"]]
            assert emails.email_heartbeat_claim(conn, now=T0 + 1.5 * MIN, ids=mine,
                                                claim_token=r["claim_token"]) == len(mine)
        # Another claim's token refreshes nothing (the guard).
        assert emails.email_heartbeat_claim(conn, now=T0 + 3 * MIN, ids=[held[0]["id"]],
                                            claim_token=held[1]["claim_token"]) == 0
    assert reap(db_url, REAPER, release=RELEASE, now=T0 + 3.4 * MIN) == Reaped()
    assert len(reap(db_url, REAPER, release=RELEASE, now=T0 + 3.6 * MIN).requeued) == 2


def test_the_heartbeat_thread_beats_until_stopped(db_url, tmp_path):
    held = _claimed(db_url, tmp_path, 1)
    beat = ClaimHeartbeat(db_url, held, interval=0.2).start()
    try:
        deadline = time.monotonic() + 30
        while not rows(db_url, "SELECT 1 FROM outreach.emails WHERE claim_heartbeat_at IS NOT NULL"):
            assert time.monotonic() < deadline, "no heartbeat within 30 s"
            time.sleep(0.1)
    finally:
        beat.stop()
    first = rows(db_url, "SELECT claim_heartbeat_at AS t FROM outreach.emails")[0]["t"]
    time.sleep(0.6)
    assert rows(db_url, "SELECT claim_heartbeat_at AS t FROM outreach.emails")[0]["t"] == first


def test_a_stamp_racing_the_short_release_is_decided_by_the_row_lock(db_url, tmp_path):
    """The stamp holds the row (uncommitted) when the reaper comes: the reaper waits for the lock,
    re-checks the newest version (stamped, claimed_at restarted) and leaves it; the sender
    sends it. The other way round, the reaper's requeue commits first and the stamp matches
    nothing: the sender does not send it. Either way exactly one of them owns the row."""
    held = _claimed(db_url, tmp_path, 2)
    first, second = held
    stamper = db.connect(db_url)  # one open transaction
    try:
        assert emails.email_touch_claim(stamper, address=first["email"], now=T0 + 3 * MIN,
                                        email_id=first["id"], claim_token=first["claim_token"])
        result: list[Reaped] = []
        reaper = threading.Thread(target=lambda: result.append(
            reap(db_url, REAPER, release=RELEASE, now=T0 + 3 * MIN)))
        reaper.start()
        time.sleep(1.0)
        assert reaper.is_alive(), "the reaper should wait for the stamp's row lock"
        stamper.commit()
        reaper.join(30)
        assert result and result[0].requeued == [second["id"]] and not result[0].unconfirmed
    finally:
        stamper.close()
    assert _status(db_url) == {first["id"]: ("sending", None), second["id"]: ("queued", None)}
    with db.connect(db_url, autocommit=True) as conn:  # the late stamp of the requeued row
        assert not emails.email_touch_claim(conn, address=second["email"], now=T0 + 4 * MIN,
                                            email_id=second["id"],
                                            claim_token=second["claim_token"])
