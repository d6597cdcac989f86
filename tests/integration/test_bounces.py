"""The effects of delivery failures by owner (issue 23), end to end: real DSNs in a real Dovecot,
read by the inbox reader into a real PostgreSQL; SMTP refusals from a real aiosmtpd. The rule and
its thresholds: docs/explanation/bounces-and-complaints.md (outreach.bounces)."""

from __future__ import annotations

import datetime as dt
import email.utils
import uuid

import pytest

from outreach.airflow.connections import imap_account
from outreach.inbox import plan_targets, read_target
from outreach.leads import import_leads
from outreach.queue import queue_due
from support.faultsmtp import FaultSMTPServer
from support.flow import leads_csv, one_mailbox, point_mailboxes_at, rows, scalar, send_all
from support.inboxflow import ANNA, IMAP_CONN_IDS, mail, next_step_recipients, sent_campaign
from support.paths import CAMPAIGN, MAILBOXES

DMARC = ("550 5.7.26 This mail has been blocked because the sender is unauthenticated. Gmail "
         "requires all senders to authenticate with either SPF or DKIM. Authentication results: "
         "DKIM = did not pass; SPF [mail.outreach-demo.example] = did not pass. DMARC policy")
FULL = "552 5.2.2 The email account that you tried to reach is over quota."
POLICY = "550 5.7.1 Message rejected due to local policy"


@pytest.fixture
def accounts(imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    return imap_accounts


def dsn(recipient: str, our_message_id: str, status: str, diagnostic: str,
        action: str = "failed", message_id: str | None = None) -> str:
    """A DSN (RFC 3464) as an MTA writes it, enclosing our message's header."""
    return f"""From: Mail Delivery Subsystem <mailer-daemon@mx.example.net>
To: {ANNA}
Subject: Delivery Status Notification (Failure)
Date: {email.utils.formatdate()}
Message-ID: {message_id or f"<{uuid.uuid4().hex}@mx.example.net>"}
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="b1"

--b1
Content-Type: text/plain

Your message could not be delivered to {recipient}.

--b1
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net

Final-Recipient: rfc822; {recipient}
Action: {action}
Status: {status}
Diagnostic-Code: smtp; {diagnostic}

--b1
Content-Type: text/rfc822-headers

From: Anna Schmidt <{ANNA}>
To: <{recipient}>
Subject: Acme and late deliveries
Message-ID: <{our_message_id}>

--b1--
"""


def read(db_url: str, now: dt.datetime | None = None) -> list:
    return [read_target(db_url, t, imap_account, now=now) for t in plan_targets(db_url)]


def state(db_url: str, lead: str) -> dict:
    """What a failure can change, for one lead: its suppression, its enrolment, its email's
    reason, the failures recorded, the mailbox."""
    (r,) = rows(db_url, """
        SELECT (SELECT reason FROM outreach.suppressions WHERE value = l.email) AS suppressed,
               en.status AS enrolment,
               e.failure_reason, e.failure_status,
               (SELECT array_agg(f.owner || ':' || f.reason) FROM outreach.delivery_failures f
                WHERE f.address = l.email) AS failures,
               (SELECT status FROM outreach.mailboxes WHERE id = e.mailbox_id) AS mailbox
        FROM outreach.leads l
        JOIN outreach.enrollments en ON en.lead_id = l.id
        JOIN outreach.emails e ON e.lead_id = l.id
        WHERE l.email = %s ORDER BY e.id LIMIT 1""", (lead,))
    return r


def test_a_dmarc_reject_pauses_the_mailbox_and_suppresses_nobody(db_url, tmp_path, sink, settings,
                                                                 accounts):
    leads = ["d1@dmarc.example", "keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    accounts.append("outreach_imap_anna", dsn(leads[0], sent[leads[0]]["message_id"], "5.7.26",
                                              DMARC))
    (anna,) = [s for s in read(db_url) if s.fetched]
    assert anna.sender_block == 1, anna.line()
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == 0
    (im,) = rows(db_url, "SELECT class, reason, dsn_status, diagnostic, email_id FROM "
                         "outreach.inbound_messages")
    assert (im["class"], im["reason"], im["dsn_status"], im["email_id"]) == \
        ("sender_block", "authfailure", "5.7.26", sent[leads[0]]["email_id"])
    assert "DMARC policy" in im["diagnostic"]
    # At once, by the block rule, with the likely fix in the reason (the pause's alert says it).
    (mb,) = rows(db_url, "SELECT status, paused_by, paused_reason FROM outreach.mailboxes "
                         "WHERE id = 1")
    assert (mb["status"], mb["paused_by"]) == ("paused", "sender-block"), mb
    assert "DMARC alignment of mail.outreach-demo.example" in mb["paused_reason"], mb
    assert state(db_url, leads[0])["enrolment"] == "active"
    # DMARC is the sending domain's: ben, on the same domain, fails the same way and pauses too;
    # both pauses are alerted like the bounce-rate rule's (mailbox_auto_pauses).
    from outreach import db
    from outreach.store.mailboxes import mailbox_auto_pauses

    with db.connect(db_url, autocommit=True) as conn:
        pauses = mailbox_auto_pauses(conn)
    assert [(p.mailbox_id, p.actor) for p in pauses] == [(1, "sender-block"), (2, "sender-block")]
    assert "authfailure (DMARC/SPF/DKIM) refusal on mail.outreach-demo.example" in pauses[1].reason


def test_mailbox_full_on_three_days_suppresses_and_on_two_does_not(db_url, tmp_path, sink,
                                                                   settings, accounts):
    campaign = tmp_path / "three.yaml"
    campaign.write_text(CAMPAIGN.read_text(encoding="utf-8") + """  - template: ops_followup
    subject: "Last note"
    delay_days: 3
    requires: [company]
""", encoding="utf-8")
    lead = "full@quota.example"
    t0 = dt.datetime.now(dt.UTC)
    sent_campaign(db_url, tmp_path, settings, [lead, "keep@quiet.example"], campaign=campaign)
    for day in range(3):
        now = t0 + dt.timedelta(days=3 * day, minutes=5)
        if day:  # the next step went out (a soft bounce stops nothing)
            queue_due(db_url, now=now)
            send_all(db_url, settings, now=now)
        (email_row,) = rows(db_url, """
            SELECT s.message_id FROM outreach.send_log s JOIN outreach.emails e ON e.id = s.email_id
            JOIN outreach.leads l ON l.id = e.lead_id
            WHERE l.email = %s ORDER BY s.id DESC LIMIT 1""", (lead,))
        accounts.append("outreach_imap_anna", dsn(lead, email_row["message_id"], "5.2.2", FULL))
        (anna,) = [s for s in read(db_url, now=now) if s.fetched]
        assert anna.soft_bounce == 1, anna.line()
        suppressed = scalar(db_url, "SELECT count(*) FROM outreach.suppressions WHERE value = %s",
                            (lead,))
        assert suppressed == (1 if day == 2 else 0), (day, rows(
            db_url, "SELECT effect FROM outreach.inbound_messages ORDER BY id"))
    (im,) = rows(db_url, "SELECT effect FROM outreach.inbound_messages ORDER BY id DESC LIMIT 1")
    assert "soft bounces on 3 different days within 30" in im["effect"]
    assert rows(db_url, "SELECT reason FROM outreach.suppressions") == [{"reason": "bounced"}]


def test_a_bounce_with_re_and_our_in_reply_to_never_stops_the_sequence(db_url, tmp_path, sink,
                                                                      settings, accounts):
    lead = "vz@verizon.example"
    sent = sent_campaign(db_url, tmp_path, settings, [lead])
    ours = sent[lead]["message_id"]
    # An MTA's notice in the shape of a reply (lhost-verizon-02): Re:, our In-Reply-To, no DSN
    # part and no address a bounce detector finds.
    accounts.append("outreach_imap_anna", mail(
        "MAILER-DAEMON@vzw.example", "Re: Acme and late deliveries",
        "Your message could not be processed at this time.\n",
        headers={"In-Reply-To": f"<{ours}>", "References": f"<{ours}>"}))
    (anna,) = [s for s in read(db_url) if s.fetched]
    assert anna.reply == 0, anna.line()
    (im,) = rows(db_url, "SELECT class, evidence FROM outreach.inbound_messages")
    assert im["class"] == "unmatched" and "never a reply" in im["evidence"], im
    assert state(db_url, lead)["enrolment"] == "active"
    assert next_step_recipients(db_url, settings, sink) == {lead}


def test_the_same_failure_reported_twice_applies_once(db_url, tmp_path, sink, settings, accounts):
    leads = ["twice@gone.example", "full@twice.example", "keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    gone = dsn(leads[0], sent[leads[0]]["message_id"], "5.1.1", "550 5.1.1 user unknown",
               message_id="<same-dsn@mx.example.net>")
    accounts.append("outreach_imap_anna", gone)
    accounts.append("outreach_imap_anna", gone)  # the very same message again (another UID)
    # Two different reports of one failure (a forwarder, a second MTA): one bounce, one day.
    accounts.append("outreach_imap_anna", dsn(leads[0], sent[leads[0]]["message_id"], "5.1.1",
                                              "550 5.1.1 user unknown"))
    t0 = dt.datetime.now(dt.UTC)
    for day in range(3):
        accounts.append("outreach_imap_anna", dsn(leads[1], sent[leads[1]]["message_id"], "5.2.2",
                                                  FULL))
        read(db_url, now=t0 + dt.timedelta(days=day))
    assert rows(db_url, "SELECT address, owner FROM outreach.delivery_failures ORDER BY id") == [
        {"address": leads[0], "owner": "address"}, {"address": leads[1], "owner": "transient"}]
    assert rows(db_url, "SELECT value FROM outreach.suppression_events") == [{"value": leads[0]}]
    classes = [r["effect"] for r in rows(db_url, "SELECT effect FROM outreach.inbound_messages "
                                                 "ORDER BY id")]
    assert len(classes) == 5 and sum("recorded before" in c for c in classes) == 3, classes
    # The bounce rate counts the address once.
    from outreach import db

    with db.connect(db_url, autocommit=True) as conn:
        (c,) = [c for c in db.run(conn, "mailbox_bounce_counts",
                                  {"now": None, "window": dt.timedelta(days=28)}) if c["id"] == 1]
    assert (c["sends"], c["hard_bounces"]) == (3, 1)


def test_a_report_naming_none_of_our_message_ids_changes_nothing(db_url, tmp_path, sink, settings,
                                                                 accounts):
    leads = ["target@victim.example", "keep@quiet.example"]
    sent_campaign(db_url, tmp_path, settings, leads)
    # A stranger's forged DSNs about a lead we mailed: gone, and a DMARC reject.
    accounts.append("outreach_imap_anna", dsn(leads[0], "forged@elsewhere.example", "5.1.1",
                                              "550 5.1.1 user unknown"))
    accounts.append("outreach_imap_anna", dsn(leads[0], "forged2@elsewhere.example", "5.7.26",
                                              DMARC))
    (anna,) = [s for s in read(db_url) if s.fetched]
    assert anna.fetched == 2, anna.line()
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.delivery_failures") == 0
    assert scalar(db_url, "SELECT status FROM outreach.mailboxes WHERE id = 1") == "active"
    for r in rows(db_url, "SELECT email_id, lead_id, effect FROM outreach.inbound_messages"):
        assert r["email_id"] is None and r["lead_id"] is not None, r  # on the lead's timeline
        assert r["effect"].startswith("none: names none of our Message-IDs"), r


def jmrp(recipient: str, our_message_id: str) -> str:
    """A Hotmail/Outlook JMRP complaint: multipart, the complained message attached with its
    original recipient in X-HmXmrOriginalRecipient (no ARF report part)."""
    return f"""From: staff@hotmail.com
To: {ANNA}
Subject: complaint about message from 192.0.2.1
Date: {email.utils.formatdate()}
Message-ID: <{uuid.uuid4().hex}@hotmail.com>
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="J"

--J
Content-Type: text/plain

This is an email abuse report for an email message received from IP 192.0.2.1.

--J
Content-Type: message/rfc822
Content-Disposition: inline

X-HmXmrOriginalRecipient: <{recipient}>
From: Anna Schmidt <{ANNA}>
To: <{recipient}>
Subject: Acme and late deliveries
Message-ID: <{our_message_id}>

Hello
--J--
"""


def test_a_jmrp_complaint_suppresses_its_complainant(db_url, tmp_path, sink, settings, accounts):
    leads = ["angry@outlook.example", "keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    accounts.append("outreach_imap_anna", jmrp(leads[0], sent[leads[0]]["message_id"]))
    (anna,) = [s for s in read(db_url) if s.fetched]
    assert anna.complaint == 1, anna.line()
    assert state(db_url, leads[0])["suppressed"] == "complained"
    assert state(db_url, leads[1])["suppressed"] is None
    assert next_step_recipients(db_url, settings, sink) == {leads[1]}


def test_a_report_citing_our_message_id_for_a_stranger_changes_nothing(db_url, tmp_path, sink,
                                                                      settings, accounts):
    """A Message-ID is no secret: a forged DMARC report that cites ours (in In-Reply-To and the
    enclosed header) but names a stranger as the failed recipient pauses nothing (review finding:
    it paused every mailbox of the domain)."""
    leads = ["real@lead.example", "keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    forged = dsn("stranger@elsewhere.example", sent[leads[0]]["message_id"], "5.7.26", DMARC)
    accounts.append("outreach_imap_anna", forged.replace(
        "MIME-Version: 1.0", f"In-Reply-To: <{sent[leads[0]]['message_id']}>\nMIME-Version: 1.0", 1))
    (anna,) = [s for s in read(db_url) if s.fetched]
    assert anna.fetched == 1, anna.line()
    assert scalar(db_url, "SELECT count(*) FROM outreach.mailboxes WHERE status = 'paused'") == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.delivery_failures") == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == 0
    (effect,) = [r["effect"] for r in rows(db_url, "SELECT effect FROM outreach.inbound_messages")]
    assert "not the recipient of email" in effect, effect


def test_the_smtp_time_and_the_dsn_5_7_1_end_in_the_same_state(db_url, tmp_path, settings, accounts,
                                                               monkeypatch):
    at_rcpt, by_dsn = "refused@policy.example", "later@policy.example"
    with FaultSMTPServer({at_rcpt: ["rcpt_571"]}) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=5))
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [at_rcpt, by_dsn]))
        one_mailbox(db_url)
        queue_due(db_url)
        send_all(db_url, settings)
    (ours,) = rows(db_url, """SELECT s.message_id FROM outreach.send_log s
                              JOIN outreach.emails e ON e.id = s.email_id
                              JOIN outreach.leads l ON l.id = e.lead_id WHERE l.email = %s""",
                   (by_dsn,))
    accounts.append("outreach_imap_anna", dsn(by_dsn, ours["message_id"], "5.7.1", POLICY))
    read(db_url)
    smtp_state, dsn_state = state(db_url, at_rcpt), state(db_url, by_dsn)
    assert smtp_state == dsn_state, (smtp_state, dsn_state)
    assert smtp_state == {"suppressed": None, "enrolment": "active",
                          "failure_reason": "policyviolation", "failure_status": "5.7.1",
                          "failures": ["sender:policyviolation"], "mailbox": "active"}
    # Refused before acceptance: it can be requeued once the sender is fixed.
    (e,) = rows(db_url, """SELECT e.id, e.status::text, e.failure_kind FROM outreach.emails e
                           JOIN outreach.leads l ON l.id = e.lead_id WHERE l.email = %s""",
                (at_rcpt,))
    assert (e["status"], e["failure_kind"]) == ("failed", "sender_refused")
    from outreach.resolve import requeue_failed

    assert requeue_failed(db_url, "sender_refused", "ops", "policy fixed").requeued == [e["id"]]


def test_the_cli_inbox_runs_the_rate_rules_and_lead_show_tells_why(db_url, tmp_path, sink,
                                                                   settings, accounts):
    import subprocess
    import sys

    from support.flow import cli_env

    leads = [f"r{i}@rate.example" for i in range(20)]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    accounts.append("outreach_imap_anna", dsn(leads[0], sent[leads[0]]["message_id"], "5.1.1",
                                              "550 5.1.1 <r0@rate.example>: user unknown"))
    env = {**cli_env(db_url, sink), **accounts.env()}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "outreach.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    p = run("inbox")
    assert p.returncode == 0, p.stderr
    # 1 hard bounce in 20 sends = 5 % > 3 %: paused by the CLI's read, as by the DAG's.
    assert "paused by the bounce_rate rule: hard-bounce rate 5 % (1 of 20" in p.stdout, p.stdout
    assert scalar(db_url, "SELECT status FROM outreach.mailboxes WHERE id = 1") == "paused"
    assert "Running detector" not in p.stdout + p.stderr and "INFO" not in p.stdout, p.stdout
    show = run("lead", "show", leads[0])
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    assert any(" sent " in f" {line} " and "step 1" in line for line in lines), show.stdout
    assert any("inbound hard_bounce" in line and "reason userunknown 5.1.1" in line
               and "suppressed r***@rate.example (bounced" in line for line in lines), show.stdout
    assert any(line.split()[3:4] == ["suppress"] and "bounced" in line for line in lines), show.stdout
    assert any("enrolled" in line and "status suppressed" in line for line in lines), show.stdout
    assert run("lead", "show", "nobody@nowhere.example").returncode == 1
    report = run("report")
    assert "hard_bounce  userunknown" in report.stdout, report.stdout


def test_apply_reported_failure_is_the_one_entry_for_other_reporters(db_url, tmp_path, sink,
                                                                    settings):
    """What the ESP webhooks will call: our Message-ID, the recipient, the report's own id."""
    from outreach import db
    from outreach.bounces import apply_reported_failure

    leads = ["esp@gone.example", "keep@quiet.example"]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    ours = sent[leads[0]]["message_id"]

    def report(message_id: str, source: str):
        with db.transaction(db_url) as conn:
            return apply_reported_failure(conn, message_id=f"<{message_id}>", recipient=leads[0],
                                          reason=None, status="5.1.1",
                                          diagnostic="550 5.1.1 no such user", source=source,
                                          actor="esp")

    assert not report("stranger@elsewhere.example", "esp:test:0").applied
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == 0
    first = report(ours, "esp:test:1")
    assert first.applied and first.suppressed, first
    assert not report(ours, "esp:test:1").applied  # the same event again
    assert not report(ours, "esp:test:2").applied  # another event about the same failure
    assert rows(db_url, "SELECT source, reason, owner FROM outreach.delivery_failures") == [
        {"source": "esp:test:1", "reason": "userunknown", "owner": "address"}]


def test_a_large_backlog_is_read_in_one_run_and_large_messages_in_part(db_url, tmp_path, sink,
                                                                       settings, accounts):
    sent_campaign(db_url, tmp_path, settings, ["keep@quiet.example"])
    for i in range(3):  # 3 MB each, of which 1 MB is read
        accounts.append("outreach_imap_anna", mail("stranger@big.example", f"Photos {i}",
                                                   ("y" * 998 + "\n") * 3000))
    for i in range(30):
        accounts.append("outreach_imap_anna", mail(f"s{i}@small.example", f"Hello {i}", "hi\n"))
    (t,) = [t for t in plan_targets(db_url) if t["mailbox_id"] == 1]
    part = read_target(db_url, t, imap_account, limit=10)
    assert (part.fetched, part.left) == (10, 23), part.line()
    rest = read_target(db_url, t, imap_account)
    assert (rest.fetched, rest.left) == (23, 0), rest.line()
    assert part.truncated + rest.truncated == 3
    assert scalar(db_url, "SELECT count(*) FROM outreach.inbound_messages") == 33
