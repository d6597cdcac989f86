"""Campaign states in the database (issue 24): a draft or awaiting campaign is imported and
previewable, but nothing of it is queued or claimed, even rows inserted by hand; approval makes
the next queue-due queue it. Real PostgreSQL, real aiosmtpd."""

from __future__ import annotations

import psycopg
import pytest

from outreach.campaign_pause import CampaignStateError, change_status
from outreach.queue import queue_due
from support.flow import EXPECTED_LEADS, import_demo, scalar, send_all
from support.paths import CAMPAIGN


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
