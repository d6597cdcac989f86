"""Pacing over whole simulated days, and the gap between a mailbox's handoffs (issue 12 item 7).

The real sender (claim under the mailbox lock, real PostgreSQL, a real aiosmtpd server) is driven
at every send-run slot of several days with a fixed clock: ``now`` steps through the 10-minute
slots of the send DAG's schedule, and each slot is claimed twice (a second, overlapping run).
The rule under test is ``mailbox_remaining_today`` in sql/queries/mailboxes.sql: no run sends more
than ceil(daily limit / runs in the full window), a day never more than its limit, and the
sends are spread evenly over the window. The gap is checked through an injected clock: no test
here sleeps or measures time.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from itertools import pairwise
from zoneinfo import ZoneInfo

import psycopg
import pytest

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.claim import Clock, claim
from outreach.mailboxes import pause_mailbox, resume_mailbox
from outreach.send import send_batch
from support.scenario import ADDRESS, one_mailbox_campaign

UTC = dt.UTC
TEN = dt.timedelta(minutes=10)
DAY = dt.timedelta(days=1)


@pytest.fixture
def paced(settings):
    """The DAG's settings: 10-minute runs; no gap here (the gap has its own tests below)."""
    return type(settings)(**{**settings.__dict__, "send_interval_minutes": 10})


def simulate(url: str, mailbox_id: int, settings, start: dt.datetime, days: int,
             at_slot=None) -> dict[dt.datetime, int]:
    """Run the sender at every 10-minute slot of ``days`` days from ``start`` (twice a slot: the
    second is an overlapping run 3 minutes later); return ``{slot start: messages sent}``.
    ``at_slot(t)`` runs before a slot's sends (a resume, say)."""
    sent: dict[dt.datetime, int] = {}
    t = start
    while t < start + days * DAY:
        if at_slot:
            at_slot(t)
        sent[t] = sum(send_batch(url, mailbox_id, 50, smtp_connector, settings, worker=w,
                                 now=t + dt.timedelta(minutes=m)).sent
                      for w, m in (("run-a", 0), ("run-b", 3)))
        t += TEN
    return sent


def per_day(sent: dict[dt.datetime, int], tz) -> dict[dt.date, int]:
    days: Counter = Counter()
    for t, n in sent.items():
        days[t.astimezone(tz).date()] += n
    return dict(days)


def sends_in(sent: dict[dt.datetime, int], start: dt.datetime, length: dt.timedelta) -> int:
    return sum(n for t, n in sent.items() if start <= t < start + length)


def test_an_all_day_window_in_utc_is_spread_over_the_whole_day(db_url, sink, paced, tmp_path):
    """Cap 50, window 00:00–24:00 UTC: 144 runs, at most ceil(50 / 144) = 1 a run, 50 a day, and
    every 4-hour block of the day gets 8 or 9 — not 50 in the first 50 runs (midnight to 08:20)."""
    start = dt.datetime(2026, 3, 4, tzinfo=UTC)
    mb = one_mailbox_campaign(db_url, tmp_path, leads=200, daily_cap=50, timezone="UTC",
                              window=("00:00", "24:00"), now=start)
    sent = simulate(db_url, mb, paced, start, days=3)
    assert max(sent.values()) == 1
    assert list(per_day(sent, UTC).values()) == [50, 50, 50]
    assert len(sink.messages()) == 150
    for day in range(3):
        blocks = [sends_in(sent, start + day * DAY + b * dt.timedelta(hours=4),
                           dt.timedelta(hours=4)) for b in range(6)]
        assert blocks == [9, 8, 8, 9, 8, 8], blocks
        # The first two hours: ceil(50 × 12 / 144) = 5, not 12 (one per run) or 50.
        assert sends_in(sent, start + day * DAY, dt.timedelta(hours=2)) == 5


def test_business_hours_in_a_non_utc_zone(db_url, sink, paced, tmp_path):
    """Cap 50, 09:00–17:00 in New York: 48 runs, at most 2 a run, 50 a day, nothing outside the
    window, and the window's first two hours send ceil(50 × 12 / 48) = 13, not 24 or 50."""
    ny = ZoneInfo("America/New_York")
    start = dt.datetime(2026, 3, 4, tzinfo=ny)  # local midnight, Wednesday
    mb = one_mailbox_campaign(db_url, tmp_path, leads=200, daily_cap=50,
                              timezone="America/New_York", now=start)
    sent = simulate(db_url, mb, paced, start, days=3)
    assert max(sent.values()) == 2
    assert list(per_day(sent, ny).values()) == [50, 50, 50]
    assert all(9 <= t.astimezone(ny).hour < 17 for t, n in sent.items() if n)
    for day in range(3):
        opening = start + day * DAY + dt.timedelta(hours=9)
        assert sends_in(sent, opening, dt.timedelta(hours=2)) == 13
        assert sends_in(sent, opening, dt.timedelta(hours=4)) == 25


def test_a_warm_up_mailbox_spreads_its_ten_over_the_day(db_url, sink, paced, tmp_path):
    """Warm-up (10 a day) with an all-day window in UTC: one send about every 144 minutes, not
    the 10 in the first 100 minutes (after midnight) that the old rule sent."""
    start = dt.datetime(2026, 3, 4, tzinfo=UTC)
    mb = one_mailbox_campaign(db_url, tmp_path, leads=100, daily_cap=50, timezone="UTC",
                              window=("00:00", "24:00"), warmup_start="2026-03-04", now=start)
    sent = simulate(db_url, mb, paced, start, days=3)
    assert max(sent.values()) == 1
    assert list(per_day(sent, UTC).values()) == [10, 10, 10]
    for day in range(3):
        first = start + day * DAY
        assert sends_in(sent, first, dt.timedelta(minutes=100)) == 1
        runs = [round((t - first) / TEN) for t, n in sent.items() if n and first <= t < first + DAY]
        assert all(14 <= b - a <= 15 for a, b in pairwise(runs)), runs


def test_a_resume_late_in_the_window_never_releases_the_backlog(db_url, sink, paced, tmp_path):
    """Paused all morning, resumed 40 minutes before a 09:00–17:00 (Berlin) window closes: the
    4 runs left send 2 each (8, not 45 of the 50), and the next day sends its usual 50 at 2 a
    run — the backlog never comes out faster than the steady rate."""
    berlin = ZoneInfo("Europe/Berlin")
    start = dt.datetime(2026, 3, 4, tzinfo=berlin)
    mb = one_mailbox_campaign(db_url, tmp_path, leads=300, daily_cap=50, now=start)
    pause_mailbox(db_url, ADDRESS, "DNS broken", "alice", now=start)
    resume_at = dt.datetime(2026, 3, 4, 16, 20, tzinfo=berlin)

    def resume(t: dt.datetime) -> None:
        if t == resume_at:
            resume_mailbox(db_url, str(mb), "bob", "DNS fixed", now=t)

    sent = simulate(db_url, mb, paced, start, days=2, at_slot=resume)
    assert max(sent.values()) == 2
    assert per_day(sent, berlin) == {start.date(): 8, start.date() + DAY: 50}
    assert sends_in(sent, resume_at, dt.timedelta(minutes=40)) == 8
    assert len(sink.messages()) == 58


# --- the gap between two handoffs of one mailbox ------------------------------------------------

class FakeClock(Clock):
    """The sender's clock, advanced only by its own sleeps, which it records."""

    def __init__(self, start: dt.datetime) -> None:
        self.t = start
        self.slept: list[float] = []
        super().__init__(now=lambda: self.t, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += dt.timedelta(seconds=seconds)


def gapped(settings, gap: float = 60, jitter: float = 0.5):
    return type(settings)(**{**settings.__dict__, "send_gap_seconds": gap,
                             "send_gap_jitter": jitter})


def next_handoff_at(url: str) -> dt.datetime:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT next_handoff_at FROM outreach.mailboxes WHERE address = %s",
                            (ADDRESS,)).fetchone()[0]


def test_claims_reserve_handoffs_a_jittered_gap_apart_across_claimers(db_url, tmp_path,
                                                                      settings):
    """Gap 60 s, jitter 0.5: every reserved handoff is 60–90 s after the one before, also
    across claims made at the same moment (concurrent batches); a claim takes only what it can
    reserve within the horizon (15 minutes, half the 30-minute reaper threshold)."""
    now = dt.datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
    mb = one_mailbox_campaign(db_url, tmp_path, leads=40, daily_cap=1000, now=now)
    s = gapped(settings)
    moments, notes = [], []
    with db.connect(db_url, autocommit=True) as conn:
        for worker in ("a", "b", "c", "d"):
            rows, note = claim(conn, mb, 50, worker=worker, now=now,
                               gap_seconds=s.send_gap_seconds, gap_jitter=s.send_gap_jitter,
                               gap_horizon=s.gap_horizon)
            moments += [r["not_before"] for r in rows]
            notes.append((len(rows), note))
    assert notes[0] == (11, "")  # floor(900 s / 90 s) + 1: sure to fit whatever the jitter
    assert notes[-1] == (0, "gap: the mailbox's next handoff is reserved beyond the claim horizon")
    assert moments[0] == now
    gaps = [(b - a).total_seconds() for a, b in pairwise(moments)]
    assert all(60 <= g < 90 for g in gaps), gaps
    assert len(set(gaps)) > 1  # jittered, not an even beat
    assert all(m <= now + s.gap_horizon for m in moments)
    assert 60 <= (next_handoff_at(db_url) - moments[-1]).total_seconds() < 90


def test_the_sender_waits_for_each_reserved_handoff(db_url, sink, tmp_path, settings):
    """One batch of 11: the sender sleeps before each handoff after the first exactly until the
    moment reserved for it (so gaps of 60–90 s), and sends every row."""
    now = dt.datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
    mb = one_mailbox_campaign(db_url, tmp_path, leads=11, daily_cap=1000, now=now)
    clock = FakeClock(now)
    summary = send_batch(db_url, mb, 50, smtp_connector, gapped(settings), now=now, clock=clock)
    assert (summary.claimed, summary.sent) == (11, 11)
    assert len(sink.messages()) == 11
    assert len(clock.slept) == 10 and all(60 <= s < 90 for s in clock.slept), clock.slept
    # The sleeps end at the last row's reserved moment: one (last) gap before next_handoff_at.
    last_gap = (next_handoff_at(db_url) - clock.t).total_seconds()
    assert 60 <= last_gap < 90
