"""The audit trail (issue 27, item 2): every operator decision leaves exactly one row in
``outreach.audit_log`` with who made it, written in the decision's own transaction; the table
refuses UPDATE, DELETE and TRUNCATE; a decision that fails leaves no row (and a row that cannot be
written undoes the decision); ``outreach audit`` prints the rows and the campaign page shows them.
Real PostgreSQL, the real CLI (subprocesses)."""

from __future__ import annotations

import getpass
import json

import psycopg
import pytest

from outreach import audit, db
from outreach.airflow import tasks_unconfirmed
from outreach.campaign_pause import (
    CampaignNotFound,
    change_status,
    pause_campaign,
    resume_campaign,
)
from outreach.enrollments import EnrollmentNotFound, stop_lead
from outreach.mailboxes import MailboxNotFound, pause_mailbox, resume_mailbox
from outreach.queue import queue_due
from outreach.report import collect
from outreach.resolve import requeue_failed, resolve
from outreach.suppression import suppress, unsuppress
from outreach.web.campaign_page import render_page
from support.flow import import_demo, leave_unconfirmed, outreach, rows, scalar
from support.paths import CAMPAIGN

KEY = "q4-ops-intro"
ANNA = "anna.schmidt@mail.outreach-demo.example"
WHO = audit.Who("os:alice", "cli")


def audit_rows(url: str) -> list[dict]:
    return rows(url, "SELECT * FROM outreach.audit_log ORDER BY id")



class Trail:
    """Asserts that each step added exactly one audit row, and returns it."""

    def __init__(self, url: str) -> None:
        self.url, self.seen = url, len(audit_rows(url))

    def one(self) -> dict:
        now = audit_rows(self.url)
        assert len(now) == self.seen + 1, now[self.seen:]
        self.seen = len(now)
        return now[-1]

    def none(self) -> None:
        now = audit_rows(self.url)
        assert len(now) == self.seen, now[self.seen:]


def test_every_decision_leaves_one_audit_row_with_its_actor(db_url):
    import_demo(db_url)
    queue_due(db_url)
    trail = Trail(db_url)
    lead = rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0]["email"]

    with db.transaction(db_url) as conn:
        suppress(conn, "Jane.Doe@acme.example", "manual", "cli", actor="alice", who=WHO)
    r = trail.one()
    assert (r["action"], r["actor"], r["via"], r["target_kind"], r["target_key"], r["reason"]) == (
        "suppress", "os:alice", "cli", "suppression", "j***@acme.example", "manual")
    assert r["details"]["by"] == "alice"
    with db.transaction(db_url) as conn:  # already suppressed: nothing changed, no row
        suppress(conn, "jane.doe@acme.example", "manual", "cli", actor="alice", who=WHO)
    trail.none()
    with db.transaction(db_url) as conn:
        unsuppress(conn, "jane.doe@acme.example", actor="alice", note="ticket 4711", who=WHO)
    r = trail.one()
    assert (r["action"], r["actor"], r["reason"], r["details"]["was"]) == (
        "unsuppress", "os:alice", "ticket 4711", "manual")

    pause_campaign(db_url, KEY, "legal review", "alice", who=WHO)
    r = trail.one()
    assert (r["action"], r["target_kind"], r["target_key"], r["campaign_key"], r["actor"]) == (
        "pause", "campaign", KEY, KEY, "os:alice")
    pause_campaign(db_url, KEY, "again", "alice", who=WHO)  # already paused
    trail.none()
    resume_campaign(db_url, KEY, "bob", "approved", who=audit.Who("bob", "airflow", "d", "r1"))
    r = trail.one()
    assert (r["action"], r["actor"], r["via"], r["dag_id"], r["run_id"]) == (
        "resume", "bob", "airflow", "d", "r1")
    assert "by" not in r["details"]  # the typed name is the actor

    pause_mailbox(db_url, ANNA, "complaints", "alice", who=WHO)
    r = trail.one()
    assert (r["action"], r["target_kind"], r["target_id"], r["target_key"]) == (
        "pause", "mailbox", 1, "a***@mail.outreach-demo.example")
    resume_mailbox(db_url, "1", "alice", "fixed", who=WHO)
    assert trail.one()["action"] == "resume"

    stop_lead(db_url, lead, KEY, "asked by phone", "alice", who=WHO)
    r = trail.one()
    assert (r["action"], r["target_kind"], r["campaign_key"], r["details"]["cancelled"]) == (
        "stop", "enrollment", KEY, 1)
    stop_lead(db_url, lead, KEY, "again", "alice", who=WHO)
    trail.none()

    held = leave_unconfirmed(db_url, 2)
    resolve(db_url, "was_sent", "alice", ids=held[:1], note="in Sent Items", who=WHO)
    r = trail.one()
    assert (r["action"], r["target_kind"], r["target_id"], r["campaign_key"],
            r["details"]["decision"]) == ("resolve", "email", held[0], KEY, "was_sent")

    with psycopg.connect(db_url) as conn:  # a not-accepted failure, as the sender leaves it
        conn.execute("UPDATE outreach.emails SET status = 'failed', failure_kind = "
                     "'retries_exhausted', last_error = '451 try later' WHERE id = %s", (held[1] + 1,))
    requeue_failed(db_url, "retries_exhausted", "alice", "relay fixed", ids=[held[1] + 1], who=WHO)
    r = trail.one()
    assert (r["action"], r["target_id"], r["details"]["ids"], r["details"]["count"]) == (
        "requeue", held[1] + 1, [held[1] + 1], 1)

    # No full address anywhere in the trail (masked keys, ids and counts only).
    text = json.dumps(audit_rows(db_url), default=str)
    assert "jane.doe@acme.example" not in text and lead not in text and ANNA not in text


def test_submit_reject_approve_are_audited(db_url, tmp_path, monkeypatch):
    draft = tmp_path / "draft.yaml"
    draft.write_text(CAMPAIGN.read_text().replace("status: active\n", ""))
    monkeypatch.setattr("support.flow.CAMPAIGN", draft)
    import_demo(db_url)
    trail = Trail(db_url)
    for verb, by in (("submit", "alice"), ("reject", "bob"), ("submit", "alice"),
                     ("approve", "bob")):
        change_status(db_url, KEY, verb, by, "why", who=audit.Who(f"os:{by}", "cli"))
        r = trail.one()
        assert (r["action"], r["actor"], r["campaign_key"]) == (verb, f"os:{by}", KEY)


def test_the_trail_refuses_update_delete_and_truncate(db_url):
    with db.transaction(db_url) as conn:
        audit.record(conn, action="settings", actor="os:alice", via="cli", target_kind="settings",
                     reason="OUTREACH_DAILY_LIMIT 50 → 80")
    for sql in ("UPDATE outreach.audit_log SET actor = 'mallory'",
                "DELETE FROM outreach.audit_log",
                "TRUNCATE outreach.audit_log"):
        with psycopg.connect(db_url) as conn, pytest.raises(
                psycopg.errors.InsufficientPrivilege, match="append-only"):
            conn.execute(sql)
    assert [(r["actor"], r["action"]) for r in audit_rows(db_url)] == [("os:alice", "settings")]


def test_a_failing_decision_leaves_no_audit_row_and_no_row_no_decision(db_url):
    import_demo(db_url)
    queue_due(db_url)
    suppressions = scalar(db_url, "SELECT count(*) FROM outreach.suppressions")  # the demo's
    with pytest.raises(CampaignNotFound):
        pause_campaign(db_url, "no-such-campaign", "x", "alice", who=WHO)
    with pytest.raises(MailboxNotFound):
        pause_mailbox(db_url, "999", "x", "alice", who=WHO)
    with pytest.raises(EnrollmentNotFound):
        stop_lead(db_url, "nobody@nowhere.example", KEY, "x", "alice", who=WHO)
    with pytest.raises(ValueError, match="unknown reason"), db.transaction(db_url) as conn:
        suppress(conn, "jane@acme.example", "because", "cli", actor="alice", who=WHO)
    # The decision and its row are one transaction: rolled back together.
    with pytest.raises(RuntimeError, match="changed my mind"), db.transaction(db_url) as conn:
        suppress(conn, "jane@acme.example", "manual", "cli", actor="alice", who=WHO)
        raise RuntimeError("changed my mind")
    assert audit_rows(db_url) == []
    # A row that cannot be written (no actor) undoes the decision it records.
    with pytest.raises(ValueError, match="needs who"):
        pause_campaign(db_url, KEY, "legal review", "alice", who=audit.Who("  ", "cli"))
    assert scalar(db_url, "SELECT status FROM outreach.campaigns WHERE key = %s", (KEY,)) == "active"
    assert scalar(db_url, "SELECT count(*) FROM outreach.campaign_events") == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == suppressions
    assert audit_rows(db_url) == []


def test_the_required_action_answer_is_audited_as_its_airflow_user(db_url, monkeypatch):
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)  # the task's database
    import_demo(db_url)
    queue_due(db_url)
    held = leave_unconfirmed(db_url, 1)
    response = {"chosen_options": ["was sent"], "responded_by_user": {"id": "7", "name": "dana"}}
    tasks_unconfirmed.review_record_task({"ids": held}, response, "outreach_unconfirmed_review", "r1")
    [r] = audit_rows(db_url)
    assert (r["action"], r["actor"], r["via"], r["dag_id"], r["run_id"], r["target_id"]) == (
        "resolve", "dana", "airflow", "outreach_unconfirmed_review", "r1", held[0])


def test_cli_records_the_os_user_and_outreach_audit_prints_the_rows(db_url, tmp_path):
    import_demo(db_url)
    p = outreach(db_url, "campaign", "pause", KEY, "--by", "alice", "--reason", "legal review")
    assert p.returncode == 0, p.stdout + p.stderr
    p = outreach(db_url, "suppress", "jane@acme.example")
    assert p.returncode == 0, p.stdout + p.stderr
    me = f"os:{getpass.getuser()}"
    assert [(r["action"], r["actor"], r["via"]) for r in audit_rows(db_url)] == [
        ("pause", me, "cli"), ("suppress", me, "cli")]

    p = outreach(db_url, "audit", "--campaign", KEY)
    assert p.returncode == 0, p.stdout + p.stderr
    [line] = p.stdout.splitlines()
    assert f"{me} (cli)  pause campaign {KEY}: legal review" in line and "'by': 'alice'" in line
    p = outreach(db_url, "audit", "--json", "--since", "1h")
    assert p.returncode == 0, p.stdout + p.stderr
    listed = json.loads(p.stdout)
    assert [(r["action"], r["target_key"]) for r in listed] == [
        ("suppress", "j***@acme.example"), ("pause", KEY)]
    assert "jane@acme.example" not in p.stdout
    p = outreach(db_url, "audit", "--since", "2999-01-01")
    assert (p.returncode, p.stdout.strip()) == (0, "no audit rows")


def test_the_campaign_page_shows_the_campaigns_last_decisions(db_url):
    import_demo(db_url)
    pause_campaign(db_url, KEY, "legal <review>", "alice", who=WHO)
    html = render_page(collect(db_url))
    section = html.split(f'<table id="audit-{KEY}">', 1)[1].split("</table>", 1)[0]
    assert "os:alice" in section and "pause" in section and "legal &lt;review&gt;" in section


def test_a_bulk_suppression_import_leaves_one_audit_row_with_its_counts(db_url, tmp_path):
    """``outreach import-suppressions`` is an operator decision (found by the attack on issue 27):
    one row naming the file and the counts, none when a re-import adds nothing."""
    csv = tmp_path / "dnc.csv"
    csv.write_text("email\njane@acme.example\nnot-an-address\nbad.example\n")
    p = outreach(db_url, "import-suppressions", str(csv),
                 OUTREACH_IMPORT_ROOTS=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    [row] = audit_rows(db_url)
    assert (row["action"], row["actor"], row["via"], row["target_kind"], row["reason"]) == (
        "suppress", f"os:{getpass.getuser()}", "cli", "suppression", "do-not-contact")
    assert row["target_key"] == str(csv)
    assert row["details"] == {"bulk": True, "added": 2, "known": 0, "invalid": 1, "cancelled": 0}
    p = outreach(db_url, "import-suppressions", str(csv),
                 OUTREACH_IMPORT_ROOTS=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(audit_rows(db_url)) == 1  # nothing added: no decision to record
