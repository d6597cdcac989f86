"""Caps, pacing and fan-out with a fixed clock: real PostgreSQL, real aiosmtpd.

Pacing (the rule: mailbox_remaining_today in sql/queries/mailboxes.sql): a day's sends are spread
evenly over the full send window — no run gives a mailbox more than ceil(daily limit / runs in the
full window), however late it is — and the number of send batches follows the configured
parallelism. Whole simulated days: tests/integration/test_pacing_days.py.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from zoneinfo import ZoneInfo

import psycopg
import pytest

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.claim import claim
from outreach.mailboxes import pause_mailbox, resume_mailbox
from outreach.queue import plan_batches, queue_due, split_work
from outreach.send import send_planned
from support import invariants
from support.flow import import_demo, scalar, send_run
from support.scenario import ADDRESS, concurrently, one_mailbox_campaign

BERLIN = ZoneInfo("Europe/Berlin")
# Wednesday 4 March 2026, 16:20 in Berlin: the 09:00–17:00 window closes in 40 minutes, so four
# 10-minute send runs are left today (16:20, 16:30, 16:40, 16:50).
T0 = dt.datetime(2026, 3, 4, 16, 20, tzinfo=BERLIN)
TEN = dt.timedelta(minutes=10)


@pytest.fixture
def paced(settings):
    """Sender settings with pacing on: 10-minute runs (the DAG's schedule), 4 batches a run."""
    return type(settings)(**{**settings.__dict__, "send_interval_minutes": 10,
                             "send_parallelism": 4})


def quota(url: str, mailbox_id: int, now: dt.datetime, interval: dt.timedelta | None = TEN) -> dict:
    with db.connect(url, autocommit=True) as conn:
        return db.one(conn, "mailbox_remaining_today",
                      {"mailbox_id": mailbox_id, "now": now, "interval": interval,
                       "gap_seconds": None, "gap_jitter": None, "horizon": None})


def sent_by_mailbox(url: str) -> dict[int, int]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT mailbox_id, count(*) FROM outreach.send_log"
                                 " GROUP BY mailbox_id").fetchall())


def test_a_run_gets_the_steady_rate_however_late_it_is(db_url, tmp_path):
    """The steady rate is ceil(50 / 48 runs of the full 09:00–17:00 window) = 2. The old rule
    divided what was left by the runs left: 13 at 16:20 and all 50 in the last run (issue 12)."""
    mb = one_mailbox_campaign(db_url, tmp_path, leads=200, daily_cap=50, now=T0)
    q = quota(db_url, mb, T0)
    assert (q["remaining"], q["window_runs"], q["runs_left"], q["run_share"], q["run_left"]) == \
        (50, 48, 4, 2, 2)
    assert q["window_start"] == dt.datetime(2026, 3, 4, 9, 0, tzinfo=BERLIN)
    assert q["window_end"] == dt.datetime(2026, 3, 4, 17, 0, tzinfo=BERLIN)
    # 16:20 is run 45 of 48: an even spread has started ceil(50 × 45 / 48) = 47 by its end.
    assert (q["run_number"], q["due_by_now"]) == (45, 47)
    # Later in the same 10-minute slot it is still the same run.
    assert quota(db_url, mb, T0 + dt.timedelta(minutes=9))["runs_left"] == 4
    # At the window's opening: run 1 of 48, ceil(50 / 48) = 2.
    morning = quota(db_url, mb, dt.datetime(2026, 3, 4, 9, 0, tzinfo=BERLIN))
    assert (morning["runs_left"], morning["run_number"], morning["run_left"]) == (48, 1, 2)
    # The last run of the window gets the steady rate too; the rest waits for tomorrow.
    last = quota(db_url, mb, dt.datetime(2026, 3, 4, 16, 55, tzinfo=BERLIN))
    assert (last["runs_left"], last["due_by_now"], last["run_left"]) == (1, 50, 2)
    # Window closed: nothing this run. Without pacing: the whole day's rest.
    assert quota(db_url, mb, dt.datetime(2026, 3, 4, 17, 0, tzinfo=BERLIN))["run_left"] == 0
    assert quota(db_url, mb, T0, interval=None)["run_left"] == 50


def test_the_daily_limit_counts_per_local_day_through_the_warm_up(db_url, tmp_path):
    """Warm-up from Monday 2 March: 10 a day for 7 days, then 15 on day 8 (Monday 9 March).
    Berlin's midnight is 23:00 UTC: the count restarts at local midnight, not at UTC's."""
    mb = one_mailbox_campaign(db_url, tmp_path, leads=40, daily_cap=40, window=("00:00", "24:00"),
                              warmup_start="2026-03-02",
                              now=dt.datetime(2026, 3, 8, 23, 0, tzinfo=BERLIN))
    with db.connect(db_url, autocommit=True) as conn:
        def take(local: str) -> tuple[int, str]:
            got, note = claim(conn, mb, 50, worker="t",
                              now=dt.datetime.fromisoformat(local).replace(tzinfo=BERLIN))
            return len(got), note

        assert take("2026-03-08 23:50") == (10, "")
        assert take("2026-03-08 23:59:59") == (0, "daily limit reached (10/10)")
        assert take("2026-03-09 00:00") == (15, "")  # 2026-03-08 23:00 UTC: a new local day
        assert take("2026-03-09 23:00") == (0, "daily limit reached (15/15)")


@pytest.mark.parametrize("tz, local_midnight, runs", [
    ("Europe/Berlin", "2027-03-28", 23 * 6),     # spring forward: a 23-hour day
    ("Europe/Berlin", "2026-10-25", 25 * 6),     # fall back: a 25-hour day
    ("America/New_York", "2027-03-14", 23 * 6),
    ("America/New_York", "2026-11-01", 25 * 6),
])
def test_runs_left_follow_the_local_day_across_dst(db_url, tmp_path, tz, local_midnight, runs):
    start = dt.datetime.fromisoformat(local_midnight).replace(tzinfo=ZoneInfo(tz))
    mb = one_mailbox_campaign(db_url, tmp_path, leads=3, daily_cap=500, timezone=tz,
                              window=("00:00", "24:00"), now=start)
    q = quota(db_url, mb, start)
    assert q["runs_left"] == runs
    assert q["run_left"] == -(-500 // runs)  # ceil


def test_resumed_mailbox_does_not_burst(db_url, sink, paced, tmp_path):
    """200 queued for a paused mailbox with a cap of 50 and four runs left today: after the
    resume each run sends the steady rate, ceil(50 / 48) = 2, and the rest waits for tomorrow.
    The old rule sent 13, 13, 12, 12 — 50 in 40 minutes: the burst of issue 12."""
    mb = one_mailbox_campaign(db_url, tmp_path, leads=200, daily_cap=50, now=T0)
    pause_mailbox(db_url, ADDRESS, "warming up DNS", "alice", now=T0 - TEN)

    # Paused: the plan skips it, and a claim refuses it.
    assert send_run(db_url, paced, now=T0) == []
    with db.connect(db_url, autocommit=True) as conn:
        assert claim(conn, mb, 50, worker="t", now=T0) == ([], "mailbox paused")
    assert sink.messages() == []

    resume_mailbox(db_url, str(mb), "bob", "DNS fixed", now=T0)
    per_run = []
    for minutes in (0, 5, 10, 20, 30, 35, 40, 50):  # 16:20 … 17:10; the window closes at 17:00
        summaries = send_run(db_url, paced, now=T0 + dt.timedelta(minutes=minutes))
        per_run.append(sum(s.sent for s in summaries))
    assert per_run == [2, 0, 2, 2, 2, 0, 0, 0]
    assert len(sink.messages()) == sum(per_run) == 8
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'") == 192
    invariants.assert_ok(db_url, sink.messages())


def test_run_share_holds_across_concurrent_batches_and_an_overlapping_run(db_url, sink, paced):
    """Two runs in the same 10-minute slot, four batches each, all at once: each mailbox sends
    exactly its share once, not once per batch or per run."""
    late = dt.datetime(2026, 3, 4, 23, 20, tzinfo=BERLIN)  # the demo window is all day: 144 runs
    import_demo(db_url, now=late)
    queue_due(db_url, now=late)
    with psycopg.connect(db_url) as conn:  # a steady rate of ceil(1440 / 144) = 10 a run
        conn.execute("UPDATE outreach.mailboxes SET daily_cap = 1440, warmup_start = NULL")
    small = type(paced)(**{**paced.__dict__, "batch_size": 5})
    plan = plan_batches(db_url, small.batch_size, parallelism=4, interval=small.send_interval,
                        now=late)
    assert len(plan) == 4 and all(b["limit"] == 5 for b in plan)
    assert Counter(m for b in plan for m, n in b["quotas"] for _ in range(n)) == {1: 10, 2: 10}
    def run(batch: dict, worker: str) -> None:
        send_planned(db_url, batch["quotas"], smtp_connector, small, worker=worker, now=late)

    concurrently(run, [(b, f"{run_}-{i}") for run_ in ("a", "b") for i, b in enumerate(plan)])
    assert sent_by_mailbox(db_url) == {1: 10, 2: 10}
    # The next run: the steady rate again.
    send_run(db_url, small, now=late + TEN)
    assert sent_by_mailbox(db_url) == {1: 20, 2: 20}
    invariants.assert_ok(db_url, sink.messages())


def test_daily_caps_hold_under_concurrent_multi_mailbox_batches(db_url, sink, settings):
    import_demo(db_url)
    queue_due(db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.mailboxes SET warmup_start = NULL,"
                     " daily_cap = CASE id WHEN 1 THEN 30 ELSE 20 END")
    def worker(i: int) -> None:
        for _ in range(6):
            quotas = [[1, 4], [2, 4]] if i % 2 else [[2, 4], [1, 4]]
            send_planned(db_url, quotas, smtp_connector, settings, worker=f"w{i}")

    concurrently(worker, [(i,) for i in range(8)])
    assert sent_by_mailbox(db_url) == {1: 30, 2: 20}
    invariants.assert_ok(db_url, sink.messages())


def test_plan_follows_parallelism_not_mailboxes(db_url):
    import_demo(db_url)
    queue_due(db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.mailboxes SET warmup_start = NULL")

    def plan(parallelism: int, batch_size: int = 50) -> list[dict]:
        return plan_batches(db_url, batch_size, parallelism=parallelism)

    def per_mailbox(batches: list[dict]) -> dict[int, int]:
        return dict(Counter(m for b in batches for m, n in b["quotas"] for _ in range(n)))

    one = plan(1)
    assert len(one) == 1 and per_mailbox(one) == {1: 25, 2: 25}  # 50 rows, both mailboxes
    three = plan(3)
    assert len(three) == 3 and all(b["limit"] == 50 and len(b["quotas"]) == 2 for b in three)
    assert per_mailbox(three) == {1: 75, 2: 75}
    many = plan(16)
    assert len(many) == 4  # 196 rows need 4 batches of 50, whatever the parallelism
    assert per_mailbox(many) == {1: 98, 2: 98}
    assert len({b["label"] for b in many}) == 4 and many[0]["label"].startswith("batch 1/4: ")
    pause_mailbox(db_url, "1", "test", "alice")
    assert per_mailbox(plan(4)) == {2: 98}
    assert plan(4)[0]["quotas"][0][0] == 2


@pytest.mark.parametrize("work, batch_size, parallelism, batches", [
    ({1: 200}, 50, 4, 4),                        # one mailbox still fans out
    ({m: 5 for m in range(1, 11)}, 50, 4, 1),    # ten mailboxes, 50 rows: one batch
    ({m: 5 for m in range(1, 11)}, 10, 4, 4),    # more work than 4 × 10: the rest waits
    ({1: 7, 2: 1}, 3, 8, 3),
])
def test_split_work(work, batch_size, parallelism, batches):
    out = split_work(work, batch_size, parallelism)
    assert len(out) == batches
    assert all(0 < b["limit"] <= batch_size and b["limit"] == sum(n for _, n in b["quotas"])
               for b in out)
    got = Counter()
    for b in out:
        for m, n in b["quotas"]:
            got[m] += n
    assert all(got[m] <= n for m, n in work.items())
    assert sum(got.values()) == min(sum(work.values()), batches * batch_size)
    assert split_work({}, 50, 4) == []
