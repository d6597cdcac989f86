"""Why a send run sends no more (the tutorial's first campaign, §5): ``outreach send`` and
``outreach report`` name, per mailbox with due emails, what holds them this run — paused, the
daily cap, the send window, the run's share, pacing — read with the plan's own rule
(``mailbox_remaining_today``, :func:`outreach.queue.run_allowances`). Real PostgreSQL, real
aiosmtpd for the command."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from zoneinfo import ZoneInfo

from outreach import db, report
from outreach.mailboxes import pause_mailbox
from outreach.queue import plan_batches, run_allowances
from outreach.send import claim
from support.flow import outreach, send_all
from support.scenario import ADDRESS, CONN_ID, one_mailbox_campaign

BERLIN = ZoneInfo("Europe/Berlin")
MORNING = dt.datetime(2026, 3, 4, 9, 0, tzinfo=BERLIN)  # the 09:00–17:00 window opens
NOON = dt.datetime(2026, 3, 4, 12, 0, tzinfo=BERLIN)    # run 19 of 48
TEN = dt.timedelta(minutes=10)


def test_each_hold_is_named_with_the_plans_figures(db_url, tmp_path, monkeypatch):
    """The walker's case: 150 a day, 98 claimed this morning, 102 due: at noon an even spread
    has started ceil(150 × 19 / 48) = 60, so pacing gives this run nothing, though 52 are left."""
    mb = one_mailbox_campaign(db_url, tmp_path, leads=200, daily_cap=150, now=MORNING)
    with db.connect(db_url, autocommit=True) as conn:
        assert len(claim(conn, mb, 98, worker="t", now=MORNING)[0]) == 98
    [a] = run_allowances(db_url, interval=TEN, now=NOON)
    assert (a.due, a.this_run, a.used, a.daily_limit, a.due_by_now, a.hold) == (
        102, 0, 98, 150, 60, "pacing")
    assert plan_batches(db_url, 50, interval=TEN, now=NOON) == []  # the plan agrees
    assert a.line() == (
        "p***@mail.outreach-test.example: 102 due, 0 this run: pacing (98 of today's 150 sent or "
        "sending; an even spread over today's send window has 60 started by the end of this run; "
        "OUTREACH_SEND_INTERVAL_MINUTES)")
    # In the morning's slot both its share (taken) and the spread bind: pacing is named, the
    # bound that outlasts the slot.
    [a] = run_allowances(db_url, interval=TEN, now=MORNING + dt.timedelta(minutes=5))
    assert (a.this_run, a.slot_used, a.hold) == (0, 98, "pacing")
    # Late in the window the spread allows more than a run's steady rate of ceil(150 / 48) = 4.
    late = dt.datetime(2026, 3, 4, 16, 50, tzinfo=BERLIN)
    [a] = run_allowances(db_url, interval=TEN, now=late)
    assert (a.this_run, a.hold) == (4, "run share")
    with db.connect(db_url, autocommit=True) as conn:
        assert len(claim(conn, mb, 4, worker="t", now=late)[0]) == 4
    [a] = run_allowances(db_url, interval=TEN, now=late + dt.timedelta(minutes=5))
    assert (a.this_run, a.hold) == (0, "run share")
    assert a.line().endswith(": at most 4 a send run, the steady rate (102 of today's 150 sent "
                             "or sending; 4 taken in this run's slot already)")
    [a] = run_allowances(db_url, interval=None, now=NOON)
    assert (a.this_run, a.hold) == (48, "daily cap")
    assert "daily cap (102 of today's 150 sent or sending, 48 left;" in a.line()
    [a] = run_allowances(db_url, interval=TEN, now=dt.datetime(2026, 3, 4, 17, 30, tzinfo=BERLIN))
    assert (a.this_run, a.hold) == (0, "send window")
    # report --json says the same, under this_run.
    monkeypatch.setenv("OUTREACH_SEND_INTERVAL_MINUTES", "10")
    [shown] = json.loads(report.render_json(report.collect(db_url, now=NOON)))["this_run"]
    [a] = run_allowances(db_url, interval=TEN, now=NOON)
    assert shown == {**dataclasses.asdict(a), "name": "Pace Tester", "line": a.line()}
    assert a.hold == "pacing"
    assert "Held this send run" in report.render_text(report.collect(db_url, now=NOON))
    pause_mailbox(db_url, ADDRESS, "DNS", "alice")
    [a] = run_allowances(db_url, interval=TEN, now=NOON)
    assert (a.this_run, a.hold) == (0, "paused")


def test_send_says_per_mailbox_why_nothing_more_goes(db_url, sink, settings, tmp_path):
    mb = one_mailbox_campaign(db_url, tmp_path, leads=5, daily_cap=3, timezone="UTC",
                              window=("00:00", "24:00"))
    assert sum(s.sent for s in send_all(db_url, settings)) == 3
    env = {f"AIRFLOW_CONN_{CONN_ID.upper()}": sink.connection_json()}
    p = outreach(db_url, "send", "--until-empty", **env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "nothing more allowed in this run:",
        "  p***@mail.outreach-test.example: 2 due, 0 this run: daily cap (3 of today's 3 sent or "
        "sending, 0 left; the rest waits for tomorrow)"]
    pause_mailbox(db_url, str(mb), "DNS", "alice")
    p = outreach(db_url, "send", **env)
    assert "  p***@mail.outreach-test.example: 2 due, 0 this run: mailbox paused" in p.stdout
    with db.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE outreach.emails SET scheduled_for = now() + interval '1 day' "
                     "WHERE status = 'queued'")
    p = outreach(db_url, "send", **env)
    assert p.stdout.splitlines() == [
        "nothing due: no queued email of an active campaign is due yet"]


def test_a_frozen_mailbox_is_held_not_planned(db_url, tmp_path):
    """A mailbox frozen today (the mailbox file's ``freeze:``, its local date) takes nothing in
    the claim (migration 0137): the plan must not give it a run, and the line names the freeze,
    not a cap or a share it still has."""
    one_mailbox_campaign(db_url, tmp_path, leads=20, daily_cap=150, now=MORNING)
    with db.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE outreach.mailboxes SET freeze_from = %s, freeze_to = %s",
                     (NOON.date(), NOON.date()))
    [a] = run_allowances(db_url, interval=TEN, now=NOON)
    assert (a.due, a.this_run, a.hold) == (20, 0, "frozen")
    assert a.line().startswith("p***@mail.outreach-test.example: 20 due, 0 this run: mailbox "
                               "frozen")
    assert plan_batches(db_url, 50, interval=TEN, now=NOON) == []
    # The day after the freeze it is planned again.
    [a] = run_allowances(db_url, interval=None, now=NOON + dt.timedelta(days=1))
    assert (a.this_run, a.hold) == (20, None)
