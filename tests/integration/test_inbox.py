"""The inbox reader against a real Dovecot (mail delivered by IMAP APPEND), a real PostgreSQL and
the real aiosmtpd sink: each message lands in the right class with the right effect, and the next
queue-due + send run sends nothing to a stopped or suppressed lead."""

from __future__ import annotations

import datetime as dt

import pytest

from outreach import db
from outreach.store.reports import report_funnel
from outreach.tokens import make_token
from support.flow import rows, scalar
from support.inboxflow import (
    BOUNCE_SAMPLES,
    IMAP_CONN_IDS,
    UNSUBSCRIBE,
    arf_report,
    bounce_sample,
    inbound,
    mail,
    next_step_recipients,
    read_all,
    sent_campaign,
)


@pytest.fixture
def accounts(imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    return imap_accounts


def test_bounces_complaint_and_unsubscribes(db_url, tmp_path, sink, settings, accounts):
    bounced = [f"b{i}@bounce{i}.example" for i in range(len(BOUNCE_SAMPLES))]
    leads = bounced + ["c1@complain.example", "u1@token.example", "u2@mailto.example",
                       "u3@firstline.example", "keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    for (name, sample_address, _mta, _kind), lead in zip(BOUNCE_SAMPLES, bounced, strict=True):
        # Each encloses our Message-ID (a report that names none of ours changes nothing:
        # test_bounces.py).
        accounts.append("outreach_imap_anna", bounce_sample(name, sample_address, lead,
                                                            sent[lead]["message_id"]))
    accounts.append("outreach_imap_anna", arf_report("c1@complain.example",
                                                     sent["c1@complain.example"]["message_id"]))
    token = make_token(settings.unsubscribe_secret, sent["u1@token.example"]["email_id"])
    # The List-Unsubscribe mailto, as a mail client fills it in: to the shared account.
    accounts.append("outreach_imap_unsubscribe", mail("someone@forwarded.example",
                    f"unsubscribe {token}", "", to=UNSUBSCRIBE, message_id="<mailto-1@token.example>"))
    accounts.append("outreach_imap_unsubscribe", mail("U Two <u2@mailto.example>", "unsubscribe",
                    "please", to=UNSUBSCRIBE, message_id="<mailto-2@mailto.example>"))
    accounts.append("outreach_imap_anna", mail("u3@firstline.example", "Re: your note",
                    "Please remove me from your list.\n\n> Hi Pat, …\n",
                    message_id="<firstline@firstline.example>"))

    summaries = read_all(db_url, settings.unsubscribe_secret)
    by_label = {s.label: s for s in summaries}
    anna = by_label["a***@mail.outreach-demo.example"]
    # dsn_05 says "Action: delayed": a delivery report, not a failure; simple_17 gives no reason:
    # a soft bounce (issue 23; the kinds are in support.inboxflow.BOUNCE_SAMPLES).
    assert (anna.fetched, anna.hard_bounce, anna.soft_bounce, anna.delivery_report,
            anna.complaint, anna.unsubscribe) == (9, 4, 2, 1, 1, 1), anna.line()
    assert by_label["u***@mail.outreach-demo.example"].unsubscribe == 2

    got = {r["address"] or r["from_address"]: r for r in inbound(db_url).values()}
    for (name, _a, mta, kind), lead in zip(BOUNCE_SAMPLES, bounced, strict=True):
        r = got[lead]
        assert r["class"] == kind, (mta, r)
        assert r["email_id"] == sent[lead]["email_id"], (mta, r)  # recorded against our email
        assert "enclosed original Message-ID" in r["evidence"], (mta, r["evidence"])
        if name == "dsn_11.txt":
            assert r["dsn_status"] == "5.1.1" and r["reason"] == "userunknown"
    assert got["c1@complain.example"]["class"] == "complaint"
    assert "feedback-report" in got["c1@complain.example"]["evidence"]
    sup = {r["value"]: r for r in rows(db_url, "SELECT value, reason, source FROM outreach.suppressions")}
    hard = [lead for (_n, _a, _m, kind), lead in zip(BOUNCE_SAMPLES, bounced, strict=True) if kind == "hard_bounce"]
    assert {a: sup[a]["reason"] for a in hard} == {a: "bounced" for a in hard}
    assert sup["c1@complain.example"]["reason"] == "complained"
    # The token named u1's email: the one-click path, whoever sent the mail.
    assert sup["u1@token.example"]["reason"] == "unsubscribed"
    assert sup["u1@token.example"]["source"].startswith("mailto:inbound:")
    assert "someone@forwarded.example" not in sup
    assert sup["u2@mailto.example"]["reason"] == sup["u3@firstline.example"]["reason"] == "unsubscribed"
    # The campaign page's funnel counts a mailto unsubscribe that names one of our emails (its
    # token), as it counts a one-click one.
    with db.connect(db_url, autocommit=True) as conn:
        funnel = {(f.campaign, f.step): f for f in report_funnel(conn)}
    # u1's, whose mailto carried its email's token; u2 and u3 were matched by address only.
    assert funnel[("q4-ops-intro", 1)].unsubscribed == 1, funnel
    # Soft bounces suppress nothing; the ledger stays: every email is still 'sent' with its log.
    soft = [lead for (_n, _a, _m, kind), lead in zip(BOUNCE_SAMPLES, bounced, strict=True)
            if kind == "soft_bounce"]
    assert not set(soft) & set(sup)
    assert scalar(db_url, "SELECT count(*) FROM outreach.send_log") == len(leads)

    # A second read finds nothing new and changes nothing.
    again = read_all(db_url, settings.unsubscribe_secret)
    assert sum(s.fetched for s in again) == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppression_events") == len(sup)

    step2 = next_step_recipients(db_url, settings, sink)
    reported = [lead for (_n, _a, _m, kind), lead in zip(BOUNCE_SAMPLES, bounced, strict=True)
                if kind == "delivery_report"]  # a delay changes nothing: the next step goes out
    assert step2 == set(soft) | set(reported) | {"keep@quiet.example"}, step2


def test_late_bounce_and_complaint_count_toward_the_rates(db_url, tmp_path, sink, settings, accounts):
    from outreach.health import pause_on_complaint_rate

    leads = [f"r{i}@rate.example" for i in range(20)]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    accounts.append("outreach_imap_anna", bounce_sample("postfix_01.txt", "xxxxx@local.ie", leads[0],
                                                        sent[leads[0]]["message_id"]))
    accounts.append("outreach_imap_anna", arf_report(leads[1], sent[leads[1]]["message_id"]))
    read_all(db_url)
    with db.connect(db_url, autocommit=True) as conn:
        counts = db.run(conn, "mailbox_bounce_counts", {"now": None, "window": dt.timedelta(days=28)})
    assert [(c["id"], c["sends"], c["hard_bounces"], c["complaints"]) for c in counts][0] == (1, 20, 1, 1)
    # 1 complaint in 20 sends = 5 % > 0.1 %: the complaint rule pauses the mailbox, with history.
    verdicts = pause_on_complaint_rate(db_url, threshold=0.001, min_sends=20)
    assert [(v.mailbox_id, v.rule, v.paused) for v in verdicts] == [(1, "complaint_rate", True)]
    assert "complaint rate 5 % (1 of 20" in verdicts[0].reason
    events = rows(db_url, "SELECT actor, reason FROM outreach.mailbox_events WHERE mailbox_id = 1")
    assert events == [{"actor": "complaint-rate", "reason": verdicts[0].reason}]


def test_a_bounce_naming_the_ace_form_of_an_idn_lead_suppresses_it(db_url, tmp_path, sink, settings,
                                                                    imap_accounts):
    """A DSN names the recipient as RCPT TO had it: the domain IDNA-encoded (ascii_domain). The
    lead is stored with its domain in Unicode: the reader must suppress the lead's normal form
    (the matched email's address), or the hard-bounced lead keeps getting the next steps."""
    from support.inboxflow import IMAP_CONN_IDS, bounce_sample, next_step_recipients, read_all, sent_campaign

    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    lead, ace = "jo@bücher.example", "jo@xn--bcher-kva.example"
    sent = sent_campaign(db_url, tmp_path, settings, [lead, "keep@quiet.example"])
    assert ace in {m["X-RcptTo"] for m in sink.messages()}
    imap_accounts.append("outreach_imap_anna", bounce_sample("postfix_01.txt", "xxxxx@local.ie", ace,
                                                             sent[lead]["message_id"]))
    (anna,) = [s for s in read_all(db_url, settings.unsubscribe_secret) if s.fetched]
    assert anna.hard_bounce == 1, anna.line()
    assert rows(db_url, "SELECT value, reason FROM outreach.suppressions") == [
        {"value": lead, "reason": "bounced"}]
    assert next_step_recipients(db_url, settings, sink) == {"keep@quiet.example"}
