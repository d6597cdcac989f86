"""Attack: a brand-new campaign file saying `status: active` launches without any approval."""

from __future__ import annotations

import pytest

from outreach.queue import queue_due
from support.flow import EXPECTED_LEADS, import_demo, scalar


@pytest.mark.xfail(strict=True, reason="attack finding: a campaign inserted active (0127) is taken"
                   " as approved: no HITL, no audit row, no approved_by")
def test_a_new_campaign_cannot_launch_itself_without_an_approval(db_url):
    import_demo(db_url)  # include/campaigns/demo.yaml says `status: active`, never approved
    queued = queue_due(db_url)["queued"]
    approvals = scalar(db_url, "SELECT count(*) FROM outreach.audit_log WHERE action = 'approve'")
    approved_by = scalar(db_url, "SELECT approved_by FROM outreach.campaigns")
    assert (queued, approvals, approved_by) != (EXPECTED_LEADS, 0, None)
