"""A/B variants per step (issue 24, item 6): the variant is chosen deterministically per (lead,
step) when the row is queued, in SQL, and stored on it; the database refuses any later change,
so a retried row is sent with its variant's copy; the report shows each variant's figures."""

from __future__ import annotations

import datetime as dt
import html
import json

import psycopg
import pytest

from outreach.campaign import ConfigError, load_campaign
from outreach.content import content_version
from outreach.leads import import_leads
from outreach.preview import preview
from outreach.queue import queue_due
from outreach.report import collect, render_json, render_text
from outreach.resolve import requeue_failed
from outreach.web.campaign_page import render_page
from support.faultsmtp import FaultSMTPServer
from support.flow import one_mailbox, point_mailboxes_at, rows, scalar, send_run
from support.paths import CAMPAIGN, MAILBOXES

TEXT = "Hello {{ lead.first_name }},\n\n{{ lead.company }}.\n\n{{ unsubscribe_url }}\n"
HTML = "<p>Hello {{ lead.first_name }}</p><a href=\"{{ unsubscribe_url }}\">unsubscribe</a>\n"
ALT_TEXT = "Short one for {{ lead.company }}.\n\n{{ unsubscribe_url }}\n"
ALT_HTML = "<p>Short one</p><a href=\"{{ unsubscribe_url }}\">unsubscribe</a>\n"


def write_campaign(tmp_path, monkeypatch, weights: tuple[int, int]) -> object:
    """A one-step campaign ``ab-test`` with variants ``alpha`` (own subject) and ``beta`` (own
    subject and template) weighted ``weights``."""
    templates = tmp_path / "templates"
    templates.mkdir(exist_ok=True)
    for name, text, markup in (("hello", TEXT, HTML), ("short", ALT_TEXT, ALT_HTML)):
        (templates / f"{name}.txt.j2").write_text(text)
        (templates / f"{name}.html.j2").write_text(markup)
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(templates))
    head = CAMPAIGN.read_text().split("steps:")[0].replace("key: q4-ops-intro", "key: ab-test")
    path = tmp_path / "ab.yaml"
    path.write_text(head + f"""steps:
  - template: hello
    subject: "Step subject"
    delay_days: 0
    variants:
      - name: alpha
        subject: "Alpha for {{{{ lead.company }}}}"
        weight: {weights[0]}
      - name: beta
        subject: "Beta for {{{{ lead.company }}}}"
        template: short
        weight: {weights[1]}
""")
    return path


def leads_file(tmp_path, n: int):
    path = tmp_path / "leads.csv"
    path.write_text("Email,First Name,Company\n"
                    + "".join(f"lead{i}@acme{i % 7}.example,Lee{i},Acme {i}\n" for i in range(n)))
    return path


@pytest.mark.parametrize("weights", [(50, 50), (70, 30)])
def test_two_thousand_leads_split_by_the_weights_and_the_same_way_every_time(
        db_url, tmp_path, monkeypatch, weights):
    campaign = write_campaign(tmp_path, monkeypatch, weights)
    import_leads(db_url, campaign, MAILBOXES, leads_file(tmp_path, 2000))
    assert queue_due(db_url, workers=2)["queued"] == 2000
    counts = {r["variant"]: r["n"] for r in rows(
        db_url, "SELECT variant, count(*)::integer AS n FROM outreach.emails GROUP BY variant")}
    assert set(counts) == {"alpha", "beta"}
    share = counts["alpha"] / 2000
    assert abs(share - weights[0] / 100) <= 0.05, counts
    # Deterministic per (lead, step): the function queue-due used gives every row its variant.
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails "
                          "WHERE variant <> outreach.step_variant_for(step_id, lead_id)") == 0


def test_a_retried_row_keeps_its_variant_and_is_sent_with_its_copy(
        db_url, tmp_path, monkeypatch, settings):
    campaign = write_campaign(tmp_path, monkeypatch, (50, 50))
    import_leads(db_url, campaign, MAILBOXES, leads_file(tmp_path, 12))
    one_mailbox(db_url)
    queue_due(db_url)
    queued = {r["email"]: r["variant"] for r in rows(
        db_url, "SELECT l.email, e.variant FROM outreach.emails e "
                "JOIN outreach.leads l ON l.id = e.lead_id")}
    assert set(queued.values()) == {"alpha", "beta"}
    # What the preview says a lead gets is the variant queued for it.
    lead = "lead3@acme3.example"
    [item] = preview(db_url, "ab-test", settings, address=lead)
    assert f"A/B variant {queued[lead]}" in item.notes

    with FaultSMTPServer(rules={a: ["rcpt_451", "accept"] for a in queued}) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json())
        send_run(db_url, settings)
        assert scalar(db_url, "SELECT count(*) FROM outreach.emails "
                              "WHERE status = 'queued' AND attempts = 1") == 12
        # Nothing may change a queued row's variant: not a requeue, not an operator's UPDATE.
        with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation) as exc:
            conn.execute("UPDATE outreach.emails SET variant = CASE variant WHEN 'alpha' "
                         "THEN 'beta' ELSE 'alpha' END, last_error = NULL")
        assert exc.value.diag.constraint_name == "outreach_emails_keep_variant"
        later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31)
        send_run(db_url, settings, now=later)

    received = {a.recipient: a.message for a in smtp.accepted}
    assert set(received) == set(queued)
    for address, msg in received.items():
        company = "Acme " + address.removeprefix("lead").split("@")[0]
        assert msg["Subject"] == f"{queued[address].capitalize()} for {company}"
        body = "".join(p.get_payload(decode=True).decode() for p in msg.walk()
                       if p.get_content_maintype() == "text")
        assert ("Short one" in body) == (queued[address] == "beta")
    sent = rows(db_url, "SELECT e.variant, s.content_version FROM outreach.emails e "
                        "JOIN outreach.send_log s ON s.email_id = e.id")
    assert {r["variant"]: r["content_version"] for r in sent} == {
        name: content_version(template, subject, campaign_key="ab-test",
                              campaign_name="Q4 operations leaders — intro", variant=name)
        for name, template, subject in (("alpha", "hello", "Alpha for {{ lead.company }}"),
                                        ("beta", "short", "Beta for {{ lead.company }}"))}
    assert len({r["content_version"] for r in sent}) == 2


def test_a_requeued_row_after_exhausted_retries_keeps_its_variant(
        db_url, tmp_path, monkeypatch, settings):
    campaign = write_campaign(tmp_path, monkeypatch, (50, 50))
    import_leads(db_url, campaign, MAILBOXES, leads_file(tmp_path, 6))
    one_mailbox(db_url)
    queue_due(db_url)
    queued = {r["email"]: r["variant"] for r in rows(
        db_url, "SELECT l.email, e.variant FROM outreach.emails e "
                "JOIN outreach.leads l ON l.id = e.lead_id")}
    refusals = ["rcpt_451"] * settings.max_attempts
    with FaultSMTPServer(rules={a: [*refusals, "accept"] for a in queued}) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json())
        clock = dt.datetime.now(dt.UTC)
        for _ in range(settings.max_attempts):
            send_run(db_url, settings, now=clock)
            clock += dt.timedelta(minutes=31)
        assert scalar(db_url, "SELECT count(*) FROM outreach.emails "
                              "WHERE failure_kind = 'retries_exhausted'") == 6
        assert requeue_failed(db_url, "retries_exhausted", "ops", "relay fixed").requeued
        send_run(db_url, settings, now=clock)
    assert {a.recipient for a in smtp.accepted} == set(queued)
    for a in smtp.accepted:
        assert a.message["Subject"].startswith(queued[a.recipient].capitalize() + " for ")
    assert {r["email"]: r["variant"] for r in rows(
        db_url, "SELECT l.email, e.variant FROM outreach.emails e JOIN outreach.leads l "
                "ON l.id = e.lead_id WHERE e.status = 'sent'")} == queued


def test_the_report_shows_each_variant_and_says_when_it_is_not_yet_significant(
        db_url, tmp_path, monkeypatch, settings, sink):
    campaign = write_campaign(tmp_path, monkeypatch, (50, 50))
    import_leads(db_url, campaign, MAILBOXES, leads_file(tmp_path, 20))
    one_mailbox(db_url)
    queue_due(db_url)
    send_run(db_url, settings)
    # Two alpha leads reply (the enrolment stops as 'replied', as the inbox reader does it).
    with psycopg.connect(db_url) as conn:
        conn.execute("""SELECT outreach.stop_enrollment(en.id, 'replied', 'a reply', 'test')
                        FROM outreach.enrollments en
                        WHERE en.lead_id IN (SELECT lead_id FROM outreach.emails
                                             WHERE variant = 'alpha' ORDER BY id LIMIT 2)""")
    per_variant = {r["variant"]: r["n"] for r in rows(
        db_url, "SELECT variant, count(*)::integer AS n FROM outreach.emails "
                "WHERE status = 'sent' GROUP BY variant")}
    report = json.loads(render_json(collect(db_url)))
    [step] = report["variants"]
    assert (step["campaign"], step["step"]) == ("ab-test", 1)
    got = {v["variant"]: v for v in step["variants"]}
    assert {k: v["sent"] for k, v in got.items()} == per_variant
    assert (got["alpha"]["replied"], got["beta"]["replied"]) == (2, 0)
    assert got["alpha"]["reply_rate"] == pytest.approx(2 / per_variant["alpha"])
    assert got["alpha"]["reply_rate_low"] < got["alpha"]["reply_rate"] < got["alpha"]["reply_rate_high"]
    assert not step["significant"]
    assert (step["best"], step["worst"]) == ("alpha", "beta")
    assert step["verdict"].startswith("not yet significant")
    text = render_text(collect(db_url))
    assert "A/B variants: ab-test step 1" in text
    assert "not yet significant" in text
    # The campaign page shows the same figures (the same collect()).
    page = render_page(collect(db_url))
    for name, v in got.items():
        for k in ("sent", "replied", "bounced", "unsubscribed", "complained"):
            assert f'data-k="variants.ab-test.1.{name}.{k}">{v[k]}</td>' in page
    assert f'data-k="variants.ab-test.1.verdict">{html.escape(step["verdict"])}</p>' in page


def test_a_campaign_file_with_one_variant_or_a_missing_template_is_refused(tmp_path, monkeypatch):
    campaign = write_campaign(tmp_path, monkeypatch, (1, 1))
    assert [v.name for v in load_campaign(campaign).steps[0].variants] == ["alpha", "beta"]
    one = campaign.with_name("one.yaml")
    text = campaign.read_text()
    one.write_text(text[:text.index("      - name: beta")])
    with pytest.raises(ConfigError, match="field steps.0.variants: .*no variants or at least two"):
        load_campaign(one)
    missing = campaign.with_name("missing.yaml")
    missing.write_text(text.replace("template: short", "template: nosuch"))
    with pytest.raises(ConfigError, match="field steps.0 variant 'beta'.template: no template file"):
        load_campaign(missing)
    zero = campaign.with_name("zero.yaml")
    zero.write_text(text.replace("weight: 1\n", "weight: 0\n", 1))
    with pytest.raises(ConfigError, match="variants.0.weight: Input should be greater than 0"):
        load_campaign(zero)
