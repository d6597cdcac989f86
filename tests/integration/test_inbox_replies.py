"""Replies and auto-replies read from a real Dovecot: a reply stops the lead's sequence (matched by
References / In-Reply-To, or by address only), an auto-reply in each header form does not (unless
the campaign says so), a stranger is unmatched; the next queue-due + send run, counted at the
SMTP sink, sends step 2 only to the leads still active."""

from __future__ import annotations

import pytest

from support.flow import rows
from support.inboxflow import IMAP_CONN_IDS, inbound, mail, next_step_recipients, read_all, sent_campaign
from support.paths import CAMPAIGN

QUOTE = "\n\nOn Tue, Anna Schmidt wrote:\n> Hi Pat,\n> a 15-minute look at your carrier data?\n"
AUTO_FORMS = [  # (lead, headers, subject) — RFC 3834 and the forms seen in the wild
    ("ar1@auto.example", {"Auto-Submitted": "auto-replied"}, "Re: hello"),
    ("ar2@auto.example", {"X-Autoreply": "yes"}, "Re: hello"),
    ("ar3@auto.example", {"X-Autorespond": "Away"}, "Re: hello"),
    ("ar4@auto.example", {"Precedence": "auto_reply"}, "Re: hello"),
    ("ar5@auto.example", {"Precedence": "bulk"}, "Re: hello"),
    ("ar6@auto.example", {"Precedence": "junk"}, "Re: hello"),
    ("ar7@auto.example", {"X-Auto-Response-Suppress": "All"}, "Re: hello"),
    ("ar8@auto.example", {}, "Out of Office: back on Monday"),
    ("ar9@auto.example", {}, "Automatische Antwort: Urlaub"),
]


@pytest.fixture
def accounts(imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    return imap_accounts


def enrollment_status(db_url: str) -> dict[str, str]:
    return {r["email"]: r["status"] for r in rows(db_url, """
        SELECT l.email, en.status FROM outreach.enrollments en JOIN outreach.leads l ON l.id = en.lead_id""")}


def test_replies_stop_the_sequence_and_auto_replies_do_not(db_url, tmp_path, sink, settings, accounts):
    replied = ["t1@thread.example", "t2@thread.example", "a1@addr.example", "a2@addr.example"]
    leads = replied + [lead for lead, _h, _s in AUTO_FORMS] + ["keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    mid = {a: sent[a]["message_id"] for a in leads}
    # Threaded by References only (the client dropped In-Reply-To), with quoted text.
    accounts.append("outreach_imap_anna", mail("T One <t1@thread.example>", "Re: Acme",
                                               "Interested, call me Tuesday." + QUOTE,
                    headers={"References": f"<older@thread.example> <{mid['t1@thread.example']}>"},
                    message_id="<t1-reply@thread.example>"))
    # Threaded by In-Reply-To, no quoted text; sent from another address of the same person.
    accounts.append("outreach_imap_anna", mail("t.two@home.example", "Re: Acme", "Not now, thanks.",
                    headers={"In-Reply-To": f"<{mid['t2@thread.example']}>"},
                    message_id="<t2-reply@thread.example>"))
    # No threading headers at all: matched by the sender's address; with and without a quote.
    accounts.append("outreach_imap_anna", mail("a1@addr.example", "Your email", "Sounds good" + QUOTE,
                    message_id="<a1-reply@addr.example>"))
    accounts.append("outreach_imap_anna", mail("A2 <A2@Addr.Example>", "question", "Who are you?",
                    message_id="<a2-reply@addr.example>"))
    for lead, headers, subject in AUTO_FORMS:
        accounts.append("outreach_imap_anna", mail(lead, subject, "I am away until Monday.",
                        headers={"In-Reply-To": f"<{mid[lead]}>", **headers},
                        message_id=f"<auto-{lead}>"))
    accounts.append("outreach_imap_anna", mail("stranger@nowhere.example", "Hello", "Do you sell boats?",
                    message_id="<stranger@nowhere.example>"))

    anna = {s.label: s for s in read_all(db_url)}["a***@mail.outreach-demo.example"]
    assert (anna.reply, anna.auto_reply, anna.unmatched) == (4, len(AUTO_FORMS), 1), anna.line()

    got = inbound(db_url)
    evidence = {m: r["evidence"] for m, r in got.items()}
    assert "matched by References" in evidence["t1-reply@thread.example"]
    assert "matched by In-Reply-To" in evidence["t2-reply@thread.example"]
    assert "matched by sender address" in evidence["a1-reply@addr.example"]
    assert "matched by sender address" in evidence["a2-reply@addr.example"]
    for lead, headers, _subject in AUTO_FORMS:
        r = got[f"auto-{lead}"]
        assert r["class"] == "auto_reply", (lead, r["evidence"])
        assert (next(iter(headers)) if headers else "Subject") in r["evidence"], r["evidence"]
        assert r["email_id"] == sent[lead]["email_id"]
        assert r["effect"].startswith("none: auto-replies do not stop")
    assert got["stranger@nowhere.example"]["class"] == "unmatched"
    assert got["stranger@nowhere.example"]["effect"] == "none"

    status = enrollment_status(db_url)
    assert {a: status[a] for a in replied} == {a: "replied" for a in replied}
    assert all(status[lead] == "active" for lead, _h, _s in AUTO_FORMS)
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.suppressions") == [{"n": 0}]

    step2 = next_step_recipients(db_url, settings, sink)
    assert step2 == {lead for lead, _h, _s in AUTO_FORMS} | {"keep@quiet.example"}, step2


def test_campaign_rules_stop_the_company_domain_and_on_auto_reply(db_url, tmp_path, sink, settings,
                                                                  accounts):
    campaign = tmp_path / "rules.yaml"
    campaign.write_text(CAMPAIGN.read_text() + "stop_on_domain_reply: true\nstop_on_auto_reply: true\n")
    leads = ["x1@acme.example", "x2@acme.example", "x3@acme.example", "g1@gmail.com",
             "g2@gmail.com", "o1@ooo.example", "keep@else.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads, campaign=campaign)
    accounts.append("outreach_imap_anna", mail("x1@acme.example", "Re: Acme", "Let's talk.",
                    headers={"In-Reply-To": f"<{sent['x1@acme.example']['message_id']}>"}))
    accounts.append("outreach_imap_anna", mail("g1@gmail.com", "Re: hi", "Interested."))
    accounts.append("outreach_imap_anna", mail("o1@ooo.example", "Automatic reply: away", "Away.",
                    headers={"Auto-Submitted": "auto-replied"}))
    read_all(db_url)
    status = enrollment_status(db_url)
    assert status == {"x1@acme.example": "replied", "x2@acme.example": "stopped",
                      "x3@acme.example": "stopped", "g1@gmail.com": "replied",
                      "g2@gmail.com": "active",  # a free-mail domain is not a company
                      "o1@ooo.example": "stopped", "keep@else.example": "active"}, status
    step2 = next_step_recipients(db_url, settings, sink)
    assert step2 == {"g2@gmail.com", "keep@else.example"}, step2
