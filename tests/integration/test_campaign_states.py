"""Campaign states in the database (issue 24): a draft or awaiting campaign is imported and
previewable, but nothing of it is queued or claimed, even rows inserted by hand; approval makes
the next queue-due queue it. Real PostgreSQL, real aiosmtpd."""

from __future__ import annotations

import shutil

import psycopg
import pytest

from outreach import db
from outreach.campaign_pause import CampaignStateError, change_status
from outreach.claim import claim
from outreach.queue import queue_due
from support.flow import EXPECTED_LEADS, import_demo, scalar, send_all
from support.paths import CAMPAIGN, ROOT


@pytest.fixture
def draft_campaign(tmp_path, monkeypatch):
    """The demo campaign file without its `status: active` line: a new campaign, a draft."""
    path = tmp_path / "draft.yaml"
    path.write_text(CAMPAIGN.read_text().replace("status: active\n", ""))
    monkeypatch.setattr("support.flow.CAMPAIGN", path)
    return path


def test_draft_is_imported_but_never_queued_or_claimed(db_url, sink, settings, draft_campaign):
    assert import_demo(db_url).imported == EXPECTED_LEADS
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "draft"
    assert queue_due(db_url)["queued"] == 0
    # Rows inserted by hand, due now: the claim (outreach.claim_emails_v1) refuses them.
    with psycopg.connect(db_url) as conn:
        conn.execute("""INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id,
                                                     scheduled_for)
                        SELECT en.lead_id, st.id, en.campaign_id, en.mailbox_id, now()
                        FROM outreach.enrollments en
                        JOIN outreach.sequence_steps st ON st.campaign_id = en.campaign_id
                                                       AND st.position = 1""")
    change_status(db_url, "q4-ops-intro", "submit", "alice", "ready")
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "awaiting_approval"
    assert send_all(db_url, settings) == []
    assert sink.messages() == []
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status <> 'queued'") == 0


def test_approval_is_recorded_and_the_next_queue_due_queues(db_url, sink, settings, draft_campaign):
    import_demo(db_url)
    with pytest.raises(CampaignStateError, match="is 'draft'; approve needs 'awaiting_approval'"):
        change_status(db_url, "q4-ops-intro", "approve", "bob", "looks good")
    assert change_status(db_url, "q4-ops-intro", "submit", "alice", "ready").changed
    assert not change_status(db_url, "q4-ops-intro", "submit", "alice", "again").changed
    rejected = change_status(db_url, "q4-ops-intro", "reject", "bob", "subject too pushy")
    assert rejected.status == "draft"
    change_status(db_url, "q4-ops-intro", "submit", "alice", "fixed")
    approved = change_status(db_url, "q4-ops-intro", "approve", "bob", "ok")
    assert (approved.changed, approved.status) == (True, "active")
    assert scalar(db_url, "SELECT approved_by FROM outreach.campaigns") == "bob"
    events = scalar(db_url, "SELECT string_agg(event || ':' || actor || ':' || reason, ',' "
                            "ORDER BY id) FROM outreach.campaign_events")
    assert events == ("submitted:alice:ready,rejected:bob:subject too pushy,"
                      "submitted:alice:fixed,approved:bob:ok")
    assert queue_due(db_url)["queued"] == EXPECTED_LEADS
    assert sum(s.sent for s in send_all(db_url, settings)) == EXPECTED_LEADS


def test_the_database_refuses_a_skipped_transition(db_url, draft_campaign):
    import_demo(db_url)
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation,
                                                        match="cannot go from draft to active"):
        conn.execute("UPDATE outreach.campaigns SET status = 'active'")


def test_a_resync_keeps_the_database_status(db_url, draft_campaign):
    import_demo(db_url)
    change_status(db_url, "q4-ops-intro", "submit", "alice", "ready")
    import_demo(db_url)
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "awaiting_approval"


def test_an_edited_template_of_an_active_campaign_needs_a_second_approval(
        db_url, sink, settings, tmp_path, monkeypatch):
    # The demo file says `status: active`: its first content is taken as approved.
    import_demo(db_url)
    assert queue_due(db_url)["queued"] == EXPECTED_LEADS
    approved = scalar(db_url, "SELECT approved_content_version FROM outreach.campaigns")
    assert approved and approved == scalar(db_url, "SELECT content_version FROM outreach.campaigns")
    # Another sync of the same files changes nothing.
    import_demo(db_url)
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "active"
    # The step's template edited (a copy of the templates folder), then the file synced again.
    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "include" / "templates", templates)
    html = templates / "ops_intro.html.j2"
    html.write_text(html.read_text() + "<p>P.S. a new line nobody approved</p>\n")
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(templates))
    import_demo(db_url)
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "awaiting_approval"
    assert scalar(db_url, "SELECT actor || ': ' || reason FROM outreach.campaign_events "
                          "ORDER BY id DESC LIMIT 1").startswith(
        "outreach: content changed while active (version ")
    # The claim (the database) returns nothing of it; its queued rows stay queued.
    with db.connect(db_url, autocommit=True) as conn:
        for mailbox in (1, 2):
            assert claim(conn, mailbox, 50, worker="test")[0] == []
    assert send_all(db_url, settings) == [] and sink.messages() == []
    # Approved again (the version shown): the queued rows go out with the new copy.
    shown = scalar(db_url, "SELECT content_version FROM outreach.campaigns")
    assert shown != approved
    with pytest.raises(CampaignStateError, match="its content changed"):
        change_status(db_url, "q4-ops-intro", "approve", "bob", "ok", content_version=approved)
    assert change_status(db_url, "q4-ops-intro", "approve", "bob", "ok",
                         content_version=shown).status == "active"
    assert scalar(db_url, "SELECT approved_content_version FROM outreach.campaigns") == shown
    assert sum(s.sent for s in send_all(db_url, settings)) == EXPECTED_LEADS


def test_the_database_sends_an_approved_campaign_back_on_a_content_change(db_url):
    """The rule is the database's, whatever writes the column: an UPDATE by hand."""
    import_demo(db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.campaigns SET content_version = 'edited-by-hand'")
        conn.commit()
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "awaiting_approval"
