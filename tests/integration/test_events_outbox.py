"""The event log as an outbox (issue 26, item 1; triggers of migration 0115): a send and a reply
read from a real Dovecot each leave one event row, in the effect's transaction, naming rows by id
and never an address."""

from __future__ import annotations

import json

import pytest

from support.flow import rows
from support.inboxflow import IMAP_CONN_IDS, mail, read_all, sent_campaign


@pytest.fixture
def accounts(imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    return imap_accounts


def test_a_reply_in_dovecot_becomes_one_replied_event(db_url, tmp_path, sink, settings, accounts):
    leads = ["r1@thread.example", "quiet@thread.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    accounts.append("outreach_imap_anna", mail("r1@thread.example", "Re: Acme", "Call me Tuesday.",
                    headers={"In-Reply-To": f"<{sent['r1@thread.example']['message_id']}>"},
                    message_id="<r1-reply@thread.example>"))
    read_all(db_url)
    read_all(db_url)  # read twice: the message is recorded once, so its event is too

    events = rows(db_url, "SELECT kind, email_id, lead_id, campaign_id, payload FROM outreach.events"
                          " ORDER BY id")
    sent_events = [e for e in events if e["kind"] == "sent"]
    assert {e["email_id"] for e in sent_events} == {s["email_id"] for s in sent.values()}
    replied = [e for e in events if e["kind"] == "replied"]
    assert len(replied) == 1, events
    assert replied[0]["email_id"] == sent["r1@thread.example"]["email_id"]
    assert replied[0]["lead_id"] is not None and replied[0]["campaign_id"] is not None
    assert replied[0]["payload"]["step_id"] is not None
    assert "@" not in json.dumps([e["payload"] for e in events])


def test_an_operators_free_text_stays_out_of_the_event(db_url, tmp_path, sink, settings):
    # A stop reason is typed by a person and may name one: the event carries ids, not the text.
    sent = sent_campaign(db_url, tmp_path, settings, ["stop@thread.example"])
    email_id = sent["stop@thread.example"]["email_id"]
    reason = "Jane Doe (jane.doe@corp.example) phoned: stop"
    rows(db_url, "SELECT outreach.stop_enrollment(n.id, 'stopped', %s, 'op') AS n FROM"
                 " outreach.enrollments n JOIN outreach.emails e ON e.lead_id = n.lead_id"
                 " AND e.campaign_id = n.campaign_id WHERE e.id = %s", (reason, email_id))
    events = rows(db_url, "SELECT kind, payload FROM outreach.events ORDER BY id")
    assert [e["kind"] for e in events if e["kind"] == "stopped"] == ["stopped"], events
    assert "Jane" not in json.dumps([e["payload"] for e in events]), events
