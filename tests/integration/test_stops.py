"""Operator controls the schema has states for (issue 11): stopping a lead's enrolment (the
SQL function outreach.stop_enrollment, shared with the inbox reader's 'replied'), and pausing and
resuming a campaign. Real PostgreSQL, the real CLI (subprocesses), messages counted at a real
aiosmtpd server."""

from __future__ import annotations

import datetime as dt
import subprocess

import psycopg
import pytest

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.claim import claim
from outreach.queue import queue_due
from outreach.send import send_batch
from support import clifork, invariants
from support.flow import EXPECTED_LEADS, cli_env, import_demo, rows, scalar, send_all

CAMPAIGN_KEY = "q4-ops-intro"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = clifork.run(args, env=env, timeout=300)
    return proc


def enrolment_of(db_url: str, email: str) -> dict:
    return rows(db_url, "SELECT en.* FROM outreach.enrollments en JOIN outreach.leads l"
                        " ON l.id = en.lead_id WHERE l.email = %s", (email,))[0]


def queued_leads(db_url: str, n: int) -> list[str]:
    return [r["email"] for r in rows(
        db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                " WHERE e.status = 'queued' ORDER BY e.id LIMIT %s", (n,))]


def stop(db_url: str, enrollment_id: int, status: str = "stopped", reason: str = "asked us",
         by: str = "alice") -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT outreach.stop_enrollment(%s, %s, %s, %s)",
                            (enrollment_id, status, reason, by)).fetchone()[0]


def test_stop_enrollment_cancels_queued_steps_and_never_touches_a_row_being_sent(db_url):
    import_demo(db_url)
    queue_due(db_url)
    first, second = queued_leads(db_url, 2)
    # The second lead's row is claimed by a sender right now: the stop must leave it to that
    # sender (whose pre-send check cancels it), never change a row under someone's claim.
    second_id = rows(db_url, "SELECT e.id, e.mailbox_id FROM outreach.emails e JOIN outreach.leads l"
                             " ON l.id = e.lead_id WHERE l.email = %s", (second,))[0]
    conn = db.connect(db_url, autocommit=True)
    held = claim(conn, second_id["mailbox_id"], EXPECTED_LEADS, worker="busy-sender")[0]
    conn.close()
    assert second_id["id"] in {r["id"] for r in held}
    queued_before = scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'")

    en = enrolment_of(db_url, first)
    first_status = scalar(db_url, "SELECT e.status::text FROM outreach.emails e JOIN outreach.leads l"
                                  " ON l.id = e.lead_id WHERE l.email = %s", (first,))
    assert stop(db_url, en["id"], "stopped", "asked us by phone", "alice") == (
        1 if first_status == "queued" else 0)
    after = enrolment_of(db_url, first)
    assert (after["status"], after["stopped_by"], after["stop_reason"]) == (
        "stopped", "alice", "asked us by phone")
    assert after["stopped_at"] is not None
    # A second stop, even as 'replied', keeps the first status, reason and time and cancels nothing.
    assert stop(db_url, en["id"], "replied", "a reply", "inbox") == 0
    assert enrolment_of(db_url, first) == after

    en2 = enrolment_of(db_url, second)
    assert stop(db_url, en2["id"], "replied", "replied to step 1", "inbox") == 0
    assert rows(db_url, "SELECT status::text AS s FROM outreach.emails WHERE id = %s",
                (second_id["id"],)) == [{"s": "sending"}]
    # Only that one lead's queued row changed, to 'cancelled' (not 'suppressed': no opt-out).
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'") == (
        queued_before - (1 if first_status == "queued" else 0))
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'suppressed'") == 0


def test_stop_enrollment_refuses_bad_calls_and_changes_nothing(db_url):
    import_demo(db_url)
    queue_due(db_url)
    en = enrolment_of(db_url, queued_leads(db_url, 1)[0])
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        stop(db_url, en["id"], "active")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        stop(db_url, en["id"], "stopped", reason=" ")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        stop(db_url, en["id"], "stopped", by="")
    with pytest.raises(psycopg.errors.NoDataFound):
        stop(db_url, 10**9)
    assert enrolment_of(db_url, queued_leads(db_url, 1)[0])["status"] == "active"
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status <> 'queued'") == 0
    # The stop and its cancellations are one transaction: rolled back together.
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT outreach.stop_enrollment(%s, 'stopped', 'x', 'y')",
                            (en["id"],)).fetchone()[0] == 1
        conn.rollback()
    assert enrolment_of(db_url, queued_leads(db_url, 1)[0])["status"] == "active"
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status <> 'queued'") == 0


def test_lead_stop_through_the_cli_sends_nothing_more_to_that_lead(db_url, sink, settings, tmp_path):
    env = cli_env(db_url, sink)
    import_demo(db_url)
    queue_due(db_url)
    send_all(db_url, settings)
    assert len(sink.messages()) == EXPECTED_LEADS
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3, minutes=5)
    # One lead stopped before step 2 is queued, one after (its queued step 2 is cancelled).
    early, late = sorted(r["email"] for r in rows(
        db_url, "SELECT l.email FROM outreach.leads l ORDER BY l.id LIMIT 2"))
    p = cli(env, "lead", "stop", early.upper(), "--campaign", CAMPAIGN_KEY, "--by", "Dana (ops)",
            "--reason", "asked by phone to stop")
    assert p.returncode == 0, p.stderr
    assert "stopped; cancelled 0 queued email(s)" in p.stdout and early not in p.stdout
    assert queue_due(db_url, now=later)["queued"] == EXPECTED_LEADS - 1
    p = cli(env, "lead", "stop", late, "--campaign", CAMPAIGN_KEY, "--by", "Dana (ops)",
            "--reason", "signed with a competitor")
    assert p.returncode == 0, p.stderr
    assert "stopped; cancelled 1 queued email(s)" in p.stdout
    again = cli(env, "lead", "stop", late, "--campaign", CAMPAIGN_KEY, "--by", "Eve",
                "--reason", "again")
    assert again.returncode == 0 and "was already stopped (by Dana (ops): signed with a competitor)" in again.stdout

    send_all(db_url, settings, now=later)  # step 2 is scheduled three days on
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    step2 = [m["X-RcptTo"] for m in messages if m["X-Outreach-Step"] == f"{CAMPAIGN_KEY}/2"]
    assert len(step2) == EXPECTED_LEADS - 2 and early not in step2 and late not in step2
    assert rows(db_url, "SELECT status::text AS s, last_error FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE l.email = %s AND e.status <> 'sent'", (late,)) == [
        {"s": "cancelled",
         "last_error": f"enrolment {enrolment_of(db_url, late)['id']} stopped by Dana (ops): "
                       "signed with a competitor"}]


def test_lead_stop_cli_names_what_is_wrong(db_url, sink, tmp_path):
    env = cli_env(db_url, sink)
    import_demo(db_url)
    p = cli(env, "lead", "stop", "nobody@nowhere.example", "--campaign", CAMPAIGN_KEY, "--by", "a",
            "--reason", "b")
    assert p.returncode == 1 and "n***@nowhere.example is not enrolled in campaign 'q4-ops-intro'" in p.stderr
    p = cli(env, "lead", "stop", "not-an-address", "--campaign", CAMPAIGN_KEY, "--by", "a",
            "--reason", "b")
    assert p.returncode == 1 and "invalid address" in p.stderr
    p = cli(env, "lead", "stop", "x@y.example",
            "--campaign", CAMPAIGN_KEY, "--by", " ", "--reason", "b")
    assert p.returncode == 1 and "who stops (--by) is required" in p.stderr
    assert "Traceback" not in p.stderr


def test_lead_stopped_after_the_claim_is_cancelled_by_the_pre_send_check(db_url, sink, settings,
                                                                          tmp_path):
    """The stop lands after the batch was claimed (its rows are 'sending', so the stop cancels
    nothing): only the pre-send check, which re-reads the enrolment next to the suppression
    check, can keep the message from going out."""
    env = cli_env(db_url, sink)
    import_demo(db_url)
    queue_due(db_url)
    victims: list[str] = []

    def connector(conn_id: str):
        # Runs inside send_batch after the claim, before the first handoff.
        r = rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                         " WHERE e.status = 'sending' ORDER BY e.id DESC LIMIT 1")[0]
        p = cli(env, "lead", "stop", r["email"], "--campaign", CAMPAIGN_KEY, "--by", "Dana",
                "--reason", "replied by phone")
        assert p.returncode == 0 and "cancelled 0 queued email(s)" in p.stdout, p.stdout + p.stderr
        victims.append(r["email"])
        return smtp_connector(conn_id)

    summary = send_batch(db_url, 1, 20, connector, settings)
    assert (summary.claimed, summary.sent, summary.cancelled) == (20, 19, 1)
    assert "cancelled=1" in summary.line()
    assert victims and victims[0] not in {m["X-RcptTo"] for m in sink.messages()}
    assert rows(db_url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE l.email = %s", (victims[0],)) == [{"s": "cancelled"}]
    invariants.assert_ok(db_url, sink.messages())


def test_campaign_pause_and_resume_through_the_cli(db_url, sink, tmp_path):
    env = cli_env(db_url, sink)
    import_demo(db_url)
    p = cli(env, "campaign", "pause", CAMPAIGN_KEY, "--by", "alice", "--reason", "legal review")
    assert p.returncode == 0 and f"campaign {CAMPAIGN_KEY} paused" in p.stdout, p.stderr
    # Paused: nothing is queued…
    assert "queued 0 email(s)" in cli(env, "queue-due").stdout
    assert cli(env, "campaign", "resume", CAMPAIGN_KEY, "--by", "bob", "--reason", "approved").returncode == 0
    assert f"queued {EXPECTED_LEADS} email(s)" in cli(env, "queue-due").stdout
    # … and nothing queued is claimed: the rows stay queued, untouched.
    p = cli(env, "campaign", "pause", CAMPAIGN_KEY, "--by", "carol", "--reason", "wrong copy in step 1")
    assert p.returncode == 0, p.stderr
    again = cli(env, "campaign", "pause", CAMPAIGN_KEY, "--by", "dave", "--reason", "again")
    assert "was already paused; nothing changed" in again.stdout
    assert f"campaign {CAMPAIGN_KEY} was already paused; nothing changed (asked by dave: again)" in again.stderr
    assert f"campaign {CAMPAIGN_KEY} paused by carol: wrong copy in step 1" in p.stderr
    p = cli(env, "send", "--until-empty")
    assert p.returncode == 0, p.stderr
    assert sink.messages() == []
    assert rows(db_url, "SELECT status::text AS s, count(*)::int AS n, max(attempts) AS a"
                        " FROM outreach.emails GROUP BY status") == [{"s": "queued", "n": EXPECTED_LEADS, "a": 0}]
    assert rows(db_url, "SELECT status, paused_by, paused_reason FROM outreach.campaigns") == [
        {"status": "paused", "paused_by": "carol", "paused_reason": "wrong copy in step 1"}]
    # Resumed: the next send run sends them.
    assert cli(env, "campaign", "resume", CAMPAIGN_KEY, "--by", "erin", "--reason", "copy fixed").returncode == 0
    p = cli(env, "send", "--until-empty")
    assert p.returncode == 0, p.stderr
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    assert len(messages) == EXPECTED_LEADS
    history = cli(env, "campaign", "history", CAMPAIGN_KEY)
    assert history.returncode == 0
    lines = history.stdout.splitlines()
    assert [ln.split("  ", 2)[2] for ln in lines] == [
        "resumed by erin: copy fixed", "paused by carol: wrong copy in step 1",
        "resumed by bob: approved", "paused by alice: legal review"]
    p = cli(env, "campaign", "pause", "no-such-campaign", "--by", "a", "--reason", "b")
    assert p.returncode == 1 and "no campaign 'no-such-campaign'" in p.stderr
