"""Attack: erasing a person with a short name must not rewrite other people's records."""

from __future__ import annotations

import json

import psycopg

from outreach.erasure import erase
from outreach.leads import import_leads
from support.flow import leads_csv, scalar
from support.paths import CAMPAIGN, MAILBOXES

KEY = "test-erasure-key-0123456789abcdef-0123"


def test_erasing_li_wei_keeps_unrelated_text(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OUTREACH_ERASURE_KEY", KEY)
    csv = leads_csv(tmp_path, ["li.wei@proseware.example,Li,Wei Freight",
                               "other.person@proseware.example,Olu,Other Ltd"])
    import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    other = scalar(db_url, "SELECT id FROM outreach.leads WHERE email LIKE 'other%%'")
    with psycopg.connect(db_url) as c:
        c.execute("INSERT INTO outreach.events (kind, lead_id, payload) VALUES ('note', %s, %s)",
                  (other, json.dumps({"step_id": 1, "note": "delivery delayed"})))
        c.execute("INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason)"
                  " SELECT id, 'paused', 'bob', 'reliability check of the weights' FROM"
                  " outreach.campaigns")
    erase(db_url, "li.wei@proseware.example", actor="dpo", reason="ticket 7")
    assert scalar(db_url, "SELECT payload->>'note' FROM outreach.events WHERE lead_id = %s",
                  (other,)) == "delivery delayed"
    assert scalar(db_url, "SELECT reason FROM outreach.campaign_events WHERE actor = 'bob'"
                  ) == "reliability check of the weights"
