"""Threaded follow-ups (issue 11): a step with ``thread: true`` goes out as a reply in the first
step's thread, checked on the messages a real aiosmtpd server received; never a fake "Re:"."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
from pathlib import Path

import psycopg
import pytest

from outreach.campaign import ConfigError, load_campaign
from outreach.campaign_pause import change_status
from outreach.leads import import_leads
from outreach.message import Envelope, MessageError, build_message
from outreach.queue import queue_due
from outreach.render import Rendered
from support import invariants
from support.flow import leads_csv, rows, send_all
from support.paths import CAMPAIGN, MAILBOXES


def threaded_campaign(tmp_path: Path, *, third: bool = False) -> Path:
    """The demo campaign (its step 2 is threaded) and, with ``third``, a threaded step 3."""
    text = CAMPAIGN.read_text()
    assert "    delay_days: 3\n    thread: true\n" in text
    if third:
        text += ("  - template: ops_followup\n    subject: \"Last note for {{ lead.company }}\"\n"
                 "    delay_days: 2\n    thread: true\n")
    path = tmp_path / "threaded.yaml"
    path.write_text(text)
    return path


def parsed(messages) -> list[email.message.EmailMessage]:
    return [email.message_from_bytes(m.as_bytes(), policy=email.policy.default) for m in messages]


def by_step(messages, step: int) -> dict[str, email.message.EmailMessage]:
    return {m["X-RcptTo"]: m for m in parsed(messages) if m["X-Outreach-Step"].endswith(f"/{step}")}


def test_threaded_follow_ups_reply_in_the_first_steps_thread(db_url, sink, settings, tmp_path):
    csv = leads_csv(tmp_path, ["ana@acme.example,Ana,Acme", "bo@globex.example,Bo,Globex"])
    import_leads(db_url, threaded_campaign(tmp_path, third=True), MAILBOXES, csv)
    queue_due(db_url)
    send_all(db_url, settings)
    now = dt.datetime.now(dt.UTC)
    for days in (3, 5):
        later = now + dt.timedelta(days=days, minutes=5)
        assert queue_due(db_url, now=later)["queued"] == 2
        send_all(db_url, settings, now=later)
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    first, second, third = (by_step(messages, n) for n in (1, 2, 3))
    assert set(first) == set(second) == set(third) == {"ana@acme.example", "bo@globex.example"}
    for rcpt in first:
        one, two, three = first[rcpt], second[rcpt], third[rcpt]
        # As received: step 2 replies to step 1; step 3 to step 2, listing the whole thread.
        assert two["In-Reply-To"] == one["Message-ID"]
        assert two["References"] == one["Message-ID"]
        assert three["In-Reply-To"] == two["Message-ID"]
        assert three["References"].split() == [one["Message-ID"], two["Message-ID"]]
        assert two["Subject"] == three["Subject"] == f"Re: {one['Subject']}"
        assert one["In-Reply-To"] is None and one["References"] is None
    assert first["ana@acme.example"]["Subject"] == "Acme and late deliveries"
    # The send log keeps each Subject as sent (the next reply's subject comes from there).
    assert {r["subject"] for r in rows(db_url, "SELECT subject FROM outreach.send_log")} == {
        "Acme and late deliveries", "Globex and late deliveries",
        "Re: Acme and late deliveries", "Re: Globex and late deliveries"}


def test_reply_subject_is_the_one_sent_even_after_the_campaign_file_changed(db_url, sink, settings,
                                                                           tmp_path):
    csv = leads_csv(tmp_path, ["ana@acme.example,Ana,Acme"])
    campaign = threaded_campaign(tmp_path)
    import_leads(db_url, campaign, MAILBOXES, csv)
    queue_due(db_url)
    send_all(db_url, settings)
    # Step 1's subject is edited after it went out; the reply keeps the subject the lead saw.
    campaign.write_text(campaign.read_text().replace("and late deliveries", "and carrier delays"))
    import_leads(db_url, campaign, MAILBOXES, csv)
    # The edit needs a second approval (migration 0127) before anything more is queued.
    change_status(db_url, "q4-ops-intro", "approve", "bob", "new subject ok")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3, minutes=5)
    assert queue_due(db_url, now=later)["queued"] == 1
    send_all(db_url, settings, now=later)
    assert by_step(sink.messages(), 2)["ana@acme.example"]["Subject"] == "Re: Acme and late deliveries"


def test_step_1_not_sent_means_a_new_message_with_its_own_subject(db_url, sink, settings, tmp_path):
    """queue-due queues step 2 only after step 1 was sent; a step-2 row that exists anyway (made
    by hand) for a lead whose step 1 failed goes out as a new message: no "Re:", no References."""
    csv = leads_csv(tmp_path, ["ana@acme.example,Ana,Acme", "bo@globex.example,Bo,Globex"])
    import_leads(db_url, threaded_campaign(tmp_path), MAILBOXES, csv)
    queue_due(db_url)
    with psycopg.connect(db_url) as conn:
        # Bo's step 1 failed for good; an operator queues his step 2 by hand.
        conn.execute("UPDATE outreach.emails e SET status = 'failed', failure_kind = 'permanent',"
                     " last_error = 'RCPT 550 5.7.1 policy' FROM outreach.leads l"
                     " WHERE l.id = e.lead_id AND l.email = 'bo@globex.example'")
        conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for)"
                     " SELECT e.lead_id, s2.id, e.campaign_id, e.mailbox_id, now() - interval '1 minute'"
                     " FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                     " JOIN outreach.sequence_steps s2 ON s2.campaign_id = e.campaign_id AND s2.position = 2"
                     " WHERE l.email = 'bo@globex.example'")
    send_all(db_url, settings)
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    bo = by_step(messages, 2)["bo@globex.example"]
    assert bo["Subject"] == "A 15-minute look at Globex's carrier data?"
    assert bo["In-Reply-To"] is None and bo["References"] is None
    assert "bo@globex.example" not in by_step(messages, 1)
    assert list(by_step(messages, 1)) == ["ana@acme.example"]


def test_thread_on_step_1_is_refused_with_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = CAMPAIGN.read_text()
    bad.write_text(text.replace("    delay_days: 0\n", "    delay_days: 0\n    thread: true\n"))
    with pytest.raises(ConfigError) as err:
        load_campaign(bad)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("  - template:"))
    assert str(err.value) == (f"{bad}, line {line}, field steps: Value error, step 1 cannot have "
                              "'thread: true': it starts the thread that later steps with "
                              "'thread: true' reply in")
    assert load_campaign(threaded_campaign(tmp_path)).steps[1].thread is True


@pytest.mark.parametrize("bad", ["x@y>\r\nBcc: victim@example.com", "no-at-sign", "a b@c",
                                 "<a@b>", "a@b\n"])
def test_a_message_id_that_is_not_one_never_reaches_a_header(bad):
    env = Envelope(from_address="anna@mail.example", from_name="Anna", to_address="ana@acme.example",
                   to_name="Ana", message_id="k@mail.example", date=dt.datetime.now(dt.UTC),
                   unsubscribe_url="https://u.example/t", unsubscribe_mailto="mailto:u@mail.example",
                   feedback_id="c:1:cold:outreach", step_tag="c/2", references=(bad, "ok@mail.example"))
    with pytest.raises(MessageError, match="header References: not a Message-ID"):
        build_message(Rendered("Re: hi", "text https://u.example/t", "<p>https://u.example/t</p>"), env)
