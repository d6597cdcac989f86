"""Attack: 'wait' behind a sequence that ended without its last step (step 1 failed)."""

from __future__ import annotations

import datetime as dt

from test_campaign_overlap import NOW, _enrol, _queued

from outreach.queue import queue_due
from support.flow import scalar


def test_wait_ends_when_the_other_sequence_stopped_at_a_failed_step(db_url, tmp_path):
    _enrol(db_url, tmp_path, "first", None, steps=2)
    assert queue_due(db_url, now=NOW)["queued"] == 5
    # p0's step 1 is refused for good (a 5xx): queue-due never queues its step 2, and the
    # campaign finish (0133) counts the enrolment as done. The others' step 1 goes out.
    scalar(db_url, "WITH s AS (UPDATE outreach.emails e SET status = 'failed', failure_kind ="
                   " 'permanent' FROM outreach.leads l WHERE l.id = e.lead_id AND l.email ="
                   " 'p0@acme0.example' RETURNING e.id) SELECT count(*) FROM s")
    scalar(db_url, "WITH s AS (UPDATE outreach.emails SET status = 'sent', sent_at = %s"
                   " WHERE status = 'queued' RETURNING id) SELECT count(*) FROM s", (NOW,))
    later = NOW + dt.timedelta(minutes=5)
    _enrol(db_url, tmp_path, "second", "wait")
    queue_due(db_url, now=later)
    # p0's sequence in "first" is over (nothing more will ever be queued for it there):
    # "second" may start it; the other four still wait for their step 2.
    assert _queued(db_url, "second") == 1


def test_wait_keeps_waiting_while_the_other_campaign_awaits_a_second_approval(db_url, tmp_path):
    _enrol(db_url, tmp_path, "first", None, steps=2)
    assert queue_due(db_url, now=NOW)["queued"] == 5
    scalar(db_url, "WITH s AS (UPDATE outreach.emails SET status = 'sent', sent_at = %s"
                   " WHERE status = 'queued' RETURNING id) SELECT count(*) FROM s", (NOW,))
    # An edit of "first" mid-sequence: it goes back to awaiting approval (0127), step 2 to come.
    scalar(db_url, "WITH s AS (UPDATE outreach.campaigns SET content_version = 'edited'"
                   " WHERE key = 'first' RETURNING id) SELECT count(*) FROM s")
    _enrol(db_url, tmp_path, "second", "wait")
    queue_due(db_url, now=NOW + dt.timedelta(minutes=5))
    # Everyone is still in the middle of "first": "second" must not start them.
    assert _queued(db_url, "second") == 0
