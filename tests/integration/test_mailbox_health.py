"""Pause / resume with history, the CLI, and the hard-bounce rule (real PostgreSQL, real
aiosmtpd refusing some recipients at RCPT)."""

from __future__ import annotations

import datetime as dt

import pytest

from outreach import db
from outreach.cli import main
from outreach.health import BOUNCE_ACTOR, bounce_rate_breach, pause_on_bounce_rate
from outreach.mailboxes import MailboxNotFound, mailbox_events, pause_mailbox, resume_mailbox
from outreach.suppression import suppress
from support import invariants
from support.flow import import_demo, rows, send_all
from support.scenario import ADDRESS, CONN_ID, BouncingServer, one_mailbox_campaign

ANNA = "anna.schmidt@mail.outreach-demo.example"
T = dt.datetime(2026, 3, 4, 10, 0, tzinfo=dt.UTC)


def status(url: str, mailbox_id: int) -> dict:
    return rows(url, "SELECT status, paused_reason, paused_by, paused_at FROM outreach.mailboxes"
                     " WHERE id = %s", (mailbox_id,))[0]


def test_pause_and_resume_are_guarded_and_recorded(db_url):
    import_demo(db_url)
    first = pause_mailbox(db_url, ANNA.upper(), "complaints from a customer", "alice", now=T)
    assert (first.mailbox_id, first.changed, first.status) == (1, True, "paused")
    assert first.mailbox == "a***@mail.outreach-demo.example"
    again = pause_mailbox(db_url, "1", "second reason", "carol", now=T + dt.timedelta(minutes=1))
    assert not again.changed  # guarded: only an active mailbox is paused
    assert status(db_url, 1) == {"status": "paused", "paused_reason": "complaints from a customer",
                                 "paused_by": "alice", "paused_at": T}
    assert status(db_url, 2)["status"] == "active"

    resumed = resume_mailbox(db_url, 1, "bob", "customer confirmed it was a mistake",
                             now=T + dt.timedelta(hours=2))
    assert resumed.changed and resumed.status == "active"
    assert not resume_mailbox(db_url, 1, "bob", "twice", now=T + dt.timedelta(hours=3)).changed
    assert status(db_url, 1) == {"status": "active", "paused_reason": None, "paused_by": None,
                                 "paused_at": None}
    history = mailbox_events(db_url, ANNA)
    assert [(e["event"], e["actor"], e["reason"], e["created_at"]) for e in history] == [
        ("resumed", "bob", "customer confirmed it was a mistake", T + dt.timedelta(hours=2)),
        ("paused", "alice", "complaints from a customer", T)]
    assert all(e["address"] == "a***@mail.outreach-demo.example" for e in history)

    with pytest.raises(MailboxNotFound):
        pause_mailbox(db_url, "nobody@mail.outreach-demo.example", "x", "alice")
    with pytest.raises(ValueError, match="reason"):
        pause_mailbox(db_url, 1, "  ", "alice")
    with pytest.raises(ValueError, match="why"):
        resume_mailbox(db_url, 1, "bob", "")


def test_cli_pause_resume_and_history(db_url, monkeypatch, capsys):
    import_demo(db_url)
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    assert main(["mailbox", "pause", ANNA, "--by", "alice", "--reason", "spam complaints"]) == 0
    assert "mailbox 1 (a***@mail.outreach-demo.example) paused" in capsys.readouterr().out
    assert status(db_url, 1)["status"] == "paused"
    assert main(["mailbox", "resume", "1", "--by", "bob", "--reason", "checked"]) == 0
    assert status(db_url, 1)["status"] == "active"
    assert main(["mailbox", "history", "1"]) == 0
    out = capsys.readouterr().out
    assert "resumed by bob: checked" in out and "paused by alice: spam complaints" in out
    assert ANNA not in out
    assert main(["mailbox", "pause", "99", "--by", "alice", "--reason", "x"]) == 1
    assert "no mailbox '99'" in capsys.readouterr().err


@pytest.mark.parametrize("sends, bounces, bounced_after_acceptance, paused", [
    (19, 5, 0, False),   # 26 % but fewer than 20 sends: not judged yet
    (100, 3, 0, False),  # 3 % is not above 3 %
    (100, 3, 1, True),   # 4 %: 3 refused at RCPT with 5.1.1, 1 bounced after acceptance
    (100, 4, 0, True),   # 4 %
])
def test_bounce_rate_pauses_a_mailbox(db_url, tmp_path, monkeypatch, settings, sends, bounces,
                                      bounced_after_acceptance, paused):
    server = BouncingServer(tmp_path / "maildir").start()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", server.connection_json())
    try:
        mb = one_mailbox_campaign(db_url, tmp_path, leads=sends, bounces=bounces, daily_cap=500,
                                  window=("00:00", "24:00"), now=T)
        send_all(db_url, settings, now=T)
    finally:
        server.stop()
    failed = rows(db_url, "SELECT failure_kind, last_error FROM outreach.emails WHERE status = 'failed'")
    assert len(failed) == bounces
    assert all(f["failure_kind"] == "permanent" and f["last_error"].startswith("RCPT 550 5.1.1")
               for f in failed)
    invariants.assert_ok(db_url, server.messages())
    if bounced_after_acceptance:  # a DSN that came back later, recorded as a suppression
        victim = rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l"
                              " ON l.id = e.lead_id WHERE e.status = 'sent' ORDER BY e.id LIMIT 1")
        with db.transaction(db_url) as conn:
            suppress(conn, victim[0]["email"], "bounced", "dsn")

    verdicts = pause_on_bounce_rate(db_url, now=T + dt.timedelta(hours=1))
    assert [v.mailbox_id for v in verdicts] == ([mb] if paused else [])
    assert status(db_url, mb)["status"] == ("paused" if paused else "active")
    if paused:
        assert status(db_url, mb)["paused_by"] == BOUNCE_ACTOR
        assert status(db_url, mb)["paused_reason"].startswith("hard-bounce rate 4 % (4 of 100 sends")
        # An operator resumes: the bounces known then do not pause it again.
        resume_mailbox(db_url, mb, "bob", "list cleaned", now=T + dt.timedelta(hours=2))
        assert pause_on_bounce_rate(db_url, now=T + dt.timedelta(hours=3)) == []
    # Outside the 28-day window nothing counts.
    assert pause_on_bounce_rate(db_url, now=T + dt.timedelta(days=29)) == []
    assert status(db_url, mb)["status"] == "active"


def test_bounce_rate_rule_boundaries():
    assert not bounce_rate_breach(19, 19, 0.03, 20)
    assert not bounce_rate_breach(20, 0, 0.03, 20)
    assert not bounce_rate_breach(100, 3, 0.03, 20)
    assert bounce_rate_breach(100, 4, 0.03, 20)
    assert bounce_rate_breach(33, 1, 0.03, 20)  # 3.03 %


def test_cli_check_bounces(db_url, tmp_path, monkeypatch, capsys, settings):
    server = BouncingServer(tmp_path / "maildir").start()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", server.connection_json())
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    try:
        mb = one_mailbox_campaign(db_url, tmp_path, leads=25, bounces=2, daily_cap=500,
                                  window=("00:00", "24:00"))
        assert main(["mailbox", "check-bounces"]) == 0
        assert "no active mailbox above the bounce-rate threshold" in capsys.readouterr().out
        send_all(db_url, settings)  # the database clock: the CLI has no fixed clock
    finally:
        server.stop()
    assert main(["mailbox", "check-bounces"]) == 0
    out = capsys.readouterr().out
    assert f"mailbox {mb} (p***@mail.outreach-test.example) paused: hard-bounce rate 8 %" in out
    assert ADDRESS not in out
    assert status(db_url, mb)["paused_by"] == BOUNCE_ACTOR
