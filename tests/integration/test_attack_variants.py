"""Attack: an edited A/B variant of an active campaign needs a second approval."""

from __future__ import annotations

from test_ab_variants import leads_file, write_campaign

from outreach.leads import import_leads
from support.flow import scalar
from support.paths import MAILBOXES


def test_an_edited_variant_subject_of_an_active_campaign_needs_a_second_approval(
        db_url, tmp_path, monkeypatch):
    campaign = write_campaign(tmp_path, monkeypatch, (50, 50))
    leads = leads_file(tmp_path, 5)
    import_leads(db_url, campaign, MAILBOXES, leads)
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "active"
    before = scalar(db_url, "SELECT content_version FROM outreach.campaigns")
    # Variant beta's subject rewritten to copy nobody approved, then synced again.
    campaign.write_text(campaign.read_text().replace("Beta for", "FREE MONEY for"))
    import_leads(db_url, campaign, MAILBOXES, leads)
    assert scalar(db_url, "SELECT subject FROM outreach.step_variants WHERE name = 'beta'"
                  ).startswith("FREE MONEY")
    assert scalar(db_url, "SELECT content_version FROM outreach.campaigns") != before
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "awaiting_approval"
