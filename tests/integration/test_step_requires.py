"""A step may require lead fields (issue 12, item 11): a template with {{ lead.first_name }} sent
"Hi ," to a lead without a first name. A lead lacking a required field is not queued for the step
(in SQL), the report and the queue summary say why with a count, and nothing "Hi ," reaches the
SMTP server."""

from __future__ import annotations

import pytest

from outreach.campaign import ConfigError, load_campaign
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.report import collect, render_text
from support.flow import rows, send_all
from support.paths import CAMPAIGN, MAILBOXES

TEXT = "Hi {{ lead.first_name }},\n\na note for {{ lead.company }}.\n\n{{ unsubscribe_url }}\n"
HTML = "<p>Hi {{ lead.first_name }},</p><p>{{ lead.company }}</p><a href=\"{{ unsubscribe_url }}\">unsubscribe</a>\n"


@pytest.fixture
def campaign(tmp_path, monkeypatch):
    """A campaign whose only template greets by first name, with ``requires: [first_name]``."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "greet.txt.j2").write_text(TEXT)
    (templates / "greet.html.j2").write_text(HTML)
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(templates))
    text = CAMPAIGN.read_text().split("steps:")[0].replace("key: q4-ops-intro", "key: greet-test")
    path = tmp_path / "greet.yaml"
    path.write_text(text + 'steps:\n  - template: greet\n    subject: "For {{ lead.company }}"\n'
                    "    delay_days: 0\n    requires: [first_name, company]\n")
    return path


def test_requires_names_only_known_lead_fields(campaign):
    assert load_campaign(campaign).steps[0].requires == ["first_name", "company"]
    bad = campaign.with_name("bad.yaml")
    bad.write_text(campaign.read_text().replace("[first_name, company]", "[first_name, nickname]"))
    with pytest.raises(ConfigError, match=r"bad.yaml, line \d+, field steps.0.requires.1: Input "
                                          r"should be 'first_name', 'last_name', 'company' or 'title'"):
        load_campaign(bad)


def body(msg) -> str:
    return "".join(p.get_payload(decode=True).decode() for p in msg.walk() if p.get_content_maintype() == "text")


def test_a_lead_missing_a_required_field_is_not_queued_and_the_report_says_why(
        db_url, sink, settings, tmp_path, campaign):
    leads = tmp_path / "leads.csv"
    leads.write_text("Email,First Name,Company\n"
                     "ann@acme.example,Ann,Acme\n"
                     "nofirst@acme.example,,Acme\n"          # no first name: would get "Hi ,"
                     "blank@acme.example,  ,Beta\n"          # blank is missing too
                     "nocompany@acme.example,Bo,\n"
                     "cy@acme.example,Cy,Gamma\n")
    import_leads(db_url, campaign, MAILBOXES, leads)
    result = queue_due(db_url)
    assert result["queued"] == 2
    assert result["held"] == [
        {"campaign": "greet-test", "step": 1, "missing": "company", "leads": 1},
        {"campaign": "greet-test", "step": 1, "missing": "first_name", "leads": 2}]
    assert queue_due(db_url)["queued"] == 0  # deterministic: the next run holds the same leads
    send_all(db_url, settings)
    received = sink.messages()
    assert sorted(m["X-RcptTo"] for m in received) == ["ann@acme.example", "cy@acme.example"]
    assert not any("Hi ," in body(m) for m in received)
    assert {m["Subject"] for m in received} == {"For Acme", "For Gamma"}
    text = render_text(collect(db_url))
    assert "greet-test step 1: 2 lead(s) not queued, missing first_name" in text
    assert "greet-test step 1: 1 lead(s) not queued, missing company" in text

    # The first name filled in by a re-import: the next queue run queues the step.
    leads.write_text(leads.read_text().replace("nofirst@acme.example,,", "nofirst@acme.example,Nia,"))
    import_leads(db_url, campaign, MAILBOXES, leads)
    again = queue_due(db_url)
    assert again["queued"] == 1
    assert [h["leads"] for h in again["held"] if h["missing"] == "first_name"] == [1]
    send_all(db_url, settings)
    assert "Hi Nia," in body([m for m in sink.messages() if m["X-RcptTo"] == "nofirst@acme.example"][0])
    assert rows(db_url, "SELECT requires FROM outreach.sequence_steps") == [
        {"requires": ["company", "first_name"]}]


@pytest.mark.parametrize(("lead", "fields", "missing"), [
    ({"first_name": "Ann", "last_name": None, "company": "  ", "title": ""},
     ["company", "first_name", "last_name", "title"], ["company", "last_name", "title"]),
    ({}, ["title", "first_name"], ["first_name", "title"]),
    ({"first_name": "Ann", "last_name": "Lee", "company": "Acme", "title": "CTO"},
     ["company", "first_name", "last_name", "title"], []),
    ({}, [], []),
])
def test_the_missing_fields_are_the_blank_required_ones_sorted(db_url, lead, fields, missing):
    """outreach.lead_missing_fields names each required field the lead has blank (NULL, empty or
    whitespace), sorted. It is one expression the planner inlines (migration 0084): queue-due and
    the report read the lead's columns instead of calling it once per lead and step."""
    import psycopg

    with psycopg.connect(db_url) as conn:
        got = conn.execute(
            "SELECT outreach.lead_missing_fields(jsonb_populate_record(NULL::outreach.leads, "
            "%s::jsonb), %s::text[])", (psycopg.types.json.Jsonb(lead), fields)).fetchone()[0]
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN VERBOSE SELECT outreach.lead_missing_fields(l, %s::text[]) "
            "FROM outreach.leads l", (fields,)).fetchall())
    assert got == missing
    assert "lead_missing_fields" not in plan, plan
