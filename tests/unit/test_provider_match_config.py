"""The provider-match keys of the campaign and mailbox files (migration 0145): parsed into the
models that campaign sync writes to the database."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from outreach.campaign import Campaign, Mailbox

CAMPAIGN = {"key": "q4-intro", "name": "Q4", "timezone": "Europe/Berlin",
            "send_window": {"days": ["mon"], "start": "09:00", "end": "17:00"},
            "mailboxes": ["a@b.example"], "steps": [{"template": "t", "subject": "s",
                                                                 "delay_days": 0}]}
MAILBOX = {"address": "a@b.example", "smtp_conn_id": "smtp"}


def test_provider_match_is_off_unless_the_campaign_says_so():
    assert Campaign.model_validate(CAMPAIGN).provider_match is False
    assert Campaign.model_validate({**CAMPAIGN, "provider_match": True}).provider_match is True


def test_a_mailbox_provider_is_one_the_mx_cache_knows():
    assert Mailbox.model_validate(MAILBOX).provider is None
    for provider in ("google", "microsoft", "yahoo", "apple", "other"):
        assert Mailbox.model_validate({**MAILBOX, "provider": provider}).provider == provider
    with pytest.raises(ValidationError, match="provider"):
        Mailbox.model_validate({**MAILBOX, "provider": "gmail"})
