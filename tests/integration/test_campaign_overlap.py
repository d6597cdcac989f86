"""A campaign's overlap choice for a person already in another campaign's sequence (migration
0134): 'wait' queues step 1 once the other sequence is done, 'skip' enrols them stopped with the
reason, 'allow' runs both. Through the real import and queue-due, at a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from outreach.leads import import_leads
from outreach.queue import queue_due
from support.flow import leads_csv, rows, scalar

NOW = dt.datetime(2026, 3, 4, 10, 0, tzinfo=dt.UTC)
PEOPLE = [f"p{i}@acme{i}.example" for i in range(5)]
MAILBOX = "anna@mail.outreach-test.example"


def _files(tmp_path: Path, key: str, overlap: str | None, steps: int) -> Path:
    (tmp_path / "mailboxes.yaml").write_text(
        f"mailboxes:\n  - address: {MAILBOX}\n    smtp_conn_id: outreach_smtp_anna\n")
    path = tmp_path / f"{key}.yaml"
    path.write_text(
        f"key: {key}\nname: {key}\nstatus: active\ntimezone: UTC\n"
        "send_window:\n  days: [mon, tue, wed, thu, fri, sat, sun]\n  start: \"00:00\"\n"
        f"  end: \"24:00\"\nmailboxes:\n  - {MAILBOX}\n"
        + (f"overlap: {overlap}\n" if overlap else "")
        + "steps:\n" + "".join(f"  - template: ops_intro\n    subject: \"Step {n}\"\n"
                                f"    delay_days: {0 if n == 1 else 2}\n"
                                for n in range(1, steps + 1)))
    return path


def _enrol(url: str, tmp_path: Path, key: str, overlap: str | None, steps: int = 1):
    csv = leads_csv(tmp_path, PEOPLE, name=f"{key}.csv")
    return import_leads(url, _files(tmp_path, key, overlap, steps), tmp_path / "mailboxes.yaml",
                        csv, now=NOW)


def _queued(url: str, key: str) -> int:
    return scalar(url, "SELECT count(*) FROM outreach.emails e JOIN outreach.campaigns c"
                       " ON c.id = e.campaign_id WHERE c.key = %s", (key,))


def _send_step(url: str, key: str, position: int, at: dt.datetime) -> None:
    """Mark the campaign's queued rows of one step sent (as the sender's mark would)."""
    scalar(url, "WITH s AS (UPDATE outreach.emails e SET status = 'sending', claim_token ="
                " gen_random_uuid(), claimed_at = %s FROM outreach.sequence_steps st,"
                " outreach.campaigns c WHERE st.id = e.step_id AND c.id = st.campaign_id"
                " AND c.key = %s AND st.position = %s AND e.status = 'queued' RETURNING e.id)"
                " SELECT count(*) FROM s", (at, key, position))
    scalar(url, "WITH s AS (UPDATE outreach.emails SET status = 'sent', sent_at = claimed_at"
                " WHERE status = 'sending' RETURNING id) SELECT count(*) FROM s")


def test_wait_queues_step_one_once_the_other_sequence_is_done(db_url, tmp_path):
    _enrol(db_url, tmp_path, "first", None, steps=2)
    assert queue_due(db_url, now=NOW)["queued"] == 5
    later = NOW + dt.timedelta(minutes=5)
    result = _enrol(db_url, tmp_path, "second", "wait")
    assert result.enrolled == 5
    # The first campaign's step 1 is out, its step 2 not yet: the second waits.
    _send_step(db_url, "first", 1, later)
    assert queue_due(db_url, now=later)["queued"] == 0
    assert _queued(db_url, "second") == 0
    # Step 2 of the first campaign is sent: the other sequence is done, the second may start.
    two_days = NOW + dt.timedelta(days=2, minutes=10)
    assert queue_due(db_url, now=two_days)["queued"] == 5  # the first campaign's step 2
    assert _queued(db_url, "second") == 0
    _send_step(db_url, "first", 2, two_days)
    assert queue_due(db_url, now=two_days)["queued"] == 5
    assert _queued(db_url, "second") == 5


def test_two_waiting_campaigns_never_wait_for_each_other(db_url, tmp_path):
    _enrol(db_url, tmp_path, "one", "wait")
    _enrol(db_url, tmp_path, "two", "wait")
    assert queue_due(db_url, now=NOW)["queued"] == 5  # the earlier enrolments go first
    assert _queued(db_url, "one") == 5 and _queued(db_url, "two") == 0


def test_skip_enrols_the_person_stopped_with_the_reason(db_url, tmp_path):
    _enrol(db_url, tmp_path, "first", None, steps=2)
    result = _enrol(db_url, tmp_path, "second", "skip")
    assert (result.enrolled, result.overlap_skipped) == (0, 5)
    assert "skipped_in_other_campaign=5" in result.summary()
    got = rows(db_url, "SELECT en.status, en.stopped_by, en.stop_reason FROM outreach.enrollments"
                       " en JOIN outreach.campaigns c ON c.id = en.campaign_id WHERE c.key ="
                       " 'second'")
    assert {(r["status"], r["stopped_by"], r["stop_reason"]) for r in got} == {
        ("stopped", "contact policy", "overlap: skip, in the sequence of campaign first")}
    queue_due(db_url, now=NOW)
    assert _queued(db_url, "second") == 0


@pytest.mark.parametrize("overlap", [None, "allow"])
def test_allow_runs_both_sequences(db_url, tmp_path, overlap):
    _enrol(db_url, tmp_path, "first", None)
    assert _enrol(db_url, tmp_path, "second", overlap).enrolled == 5
    assert queue_due(db_url, now=NOW)["queued"] == 10
