"""The calendar keys of the campaign and mailbox files (migration 0137): parsed into the models
that campaign sync writes to the database."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from outreach.campaign import Campaign, Mailbox

CAMPAIGN = {"key": "q4-intro", "name": "Q4", "timezone": "Europe/Berlin",
            "send_window": {"days": ["mon"], "start": "09:00", "end": "17:00"},
            "mailboxes": ["a@b.example"], "steps": [{"template": "t", "subject": "s",
                                                                 "delay_days": 0}]}
MAILBOX = {"address": "a@b.example", "smtp_conn_id": "smtp"}


def test_campaign_calendar_keys():
    c = Campaign.model_validate({**CAMPAIGN, "business_days": True, "country": "de",
                                 "blackout_dates": ["2026-12-24", "2026-12-31"]})
    assert (c.business_days, c.country) == (True, "de")
    assert c.blackout_dates == [dt.date(2026, 12, 24), dt.date(2026, 12, 31)]
    assert Campaign.model_validate(CAMPAIGN).blackout_dates == []
    with pytest.raises(ValidationError, match="country"):
        Campaign.model_validate({**CAMPAIGN, "country": "Germany"})


def test_mailbox_freeze_has_from_and_to_in_order():
    m = Mailbox.model_validate({**MAILBOX, "freeze": {"from": "2026-12-20", "to": "2027-01-03"}})
    assert m.freeze is not None
    assert (m.freeze.from_, m.freeze.to) == (dt.date(2026, 12, 20), dt.date(2027, 1, 3))
    with pytest.raises(ValidationError, match="before"):
        Mailbox.model_validate({**MAILBOX, "freeze": {"from": "2026-12-20", "to": "2026-12-01"}})
    with pytest.raises(ValidationError, match="to"):
        Mailbox.model_validate({**MAILBOX, "freeze": {"from": "2026-12-20"}})
