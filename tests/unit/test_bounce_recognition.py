"""Recognition beyond flufl.bounce (issue 23): our own hand-written samples in the shapes sisimai's
corpus showed us misreading — each a message a real MTA or provider writes, reduced to what
decides. No real corpus file is copied here (bench/bench_inbound.py scores the corpus)."""

from __future__ import annotations

import logging

import pytest

from outreach.inbound import classify
from outreach.reasons import reason_of

OURS = "<20261201.abc123@mail.outreach.example>"


def _raw(text: str) -> bytes:
    return text.lstrip("\n").replace("\n", "\r\n").encode("utf-8")


VERIZON_RE = f"""
From: post_master@vtext.example.com
To: anna@outreach.example
Message-ID: <00000000.1111.JavaMail.c@vtext.example.com>
In-Reply-To: {OURS}
Subject: Re: Quick question
MIME-Version: 1.0
Content-Type: text/plain; charset=us-ascii

Error: Invalid user address

Error message below:
550 - Requested action not taken: no such user here

Message details:
  Subject: Quick question
  MAIL FROM: anna@outreach.example
  RCPT TO: gone@lead.example
"""

EXIM_PLAIN = f"""
From: Mail Delivery System <mail@mx.lead.example>
To: anna@outreach.example
Auto-Submitted: auto-replied
Subject: Message not delivered: Quick question
Message-Id: <E1abc-0001@mx.lead.example>

This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  gone@lead.example
    SMTP error from remote mail server after RCPT TO:<gone@lead.example>:
    550 5.1.1 <gone@lead.example>: Recipient address rejected: User unknown

------ This is a copy of the message, including all the headers. ------

Return-path: <anna@outreach.example>
Message-ID: {OURS}
From: Anna <anna@outreach.example>
To: gone@lead.example
Subject: Quick question

Hello
"""

DRAGONFLY_DMARC = """
From: MAILER-DAEMON <>
To: anna@outreach.example
Subject: Mail delivery failed
Message-Id: <e0720@relay.outreach.example>

This is the DragonFly Mail Agent v0.13 at relay.outreach.example.

There was an error delivering your mail to <lead@gmail.example>.

mx.gmail.example [192.0.2.27] did not like our final DATA:
550-5.7.26 Unauthenticated email from outreach.example is not accepted due to domain's
550 5.7.26 DMARC policy.

Message headers follow.

Received: from root (uid 0) by relay.outreach.example
Message-Id: <1.2.3@relay.outreach.example>
To: <lead@gmail.example>
From: <anna@outreach.example>
"""

V5_SENDMAIL = """
Return-Path: <MAILER-DAEMON@mx.outreach.example>
From: Mail Delivery Subsystem <MAILER-DAEMON@mx.outreach.example>
Subject: Returned mail: Cannot send message for 4 days
Message-Id: <0001@mx.outreach.example>
To: anna@outreach.example

   ----- Transcript of session follows -----
421 lead.example (smtp)... Deferred: Connection timed out during user open with lead.example

   ----- Unsent message follows -----
Received: by mx.outreach.example; id 0000000
From: anna@outreach.example
To: lead@lead.example
Subject: Quick question

Hello
"""

BROKEN_BOUNDARY = """
Return-Path: <>
From: MAILER-DAEMON@mx.outreach.example (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: anna@outreach.example
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="DECLARED.1"

--ACTUAL.2
Content-Type: text/plain

<gone@lead.example>: host mx.lead.example said: 550 5.1.1 The email account that you
    tried to reach does not exist. (in reply to RCPT TO command)

--ACTUAL.2
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.outreach.example

Final-Recipient: rfc822; gone@lead.example
Action: failed
Status: 5.1.1
Diagnostic-Code: smtp; 550 5.1.1 The email account that you tried to reach does not exist.

--ACTUAL.2--
"""

TWO_OUTCOMES = """
Return-Path: <>
From: MAILER-DAEMON@mx.outreach.example
To: anna@outreach.example
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="B"

--B
Content-Type: text/plain

Two recipients failed.

--B
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.outreach.example

Final-Recipient: rfc822; gone@lead.example
Action: failed
Status: 5.1.1
Diagnostic-Code: smtp; 550 5.1.1 <gone@lead.example>: User unknown

Final-Recipient: rfc822; full@lead.example
Action: failed
Status: 5.2.2
Diagnostic-Code: smtp; 552 5.2.2 <full@lead.example>: Mailbox full

--B--
"""

DELAYED = """
Return-Path: <>
From: MAILER-DAEMON@mx.outreach.example
To: anna@outreach.example
Subject: Delayed Mail (still being retried)
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="B"

--B
Content-Type: text/plain

This is only a warning; you do not need to resend your message.

--B
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.outreach.example

Final-Recipient: rfc822; slow@lead.example
Action: delayed
Status: 4.4.1
Diagnostic-Code: X-Postfix; connect to mx.lead.example: Connection timed out

--B--
"""

KDDI_FULL = """
From: no-reply@ezweb.example.jp
To: anna@outreach.example
Subject: =?UTF-8?B?44Oh44O844Or44Ko44Op44O86YCa55+l?=
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="K"

--K
Content-Type: text/plain; charset="UTF-8"

送信先のメールボックスが一杯のため、送信できませんでした。

Your mail sent on: Thu, 29 Apr 2013 23:45:22 +0900
     Could not be delivered to: <lead@ezweb.example.jp>
     As their mailbox is full.

--K
Content-Type: message/rfc822

From: anna@outreach.example
To: lead@ezweb.example.jp
Message-ID: <20261201.abc123@mail.outreach.example>
Subject: Quick question

Hello
--K--
"""

SES_BOUNCE = """
From: SES <no-reply@sns.amazonaws.example>
To: ops@outreach.example
Subject: AWS Notification Message
Message-ID: <n1@ses.example>
Content-Type: text/plain; charset=UTF-8

{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bouncedRecipients":[
{"emailAddress":"gone@lead.example","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"}]},
"mail":{"messageId":"x","destination":["gone@lead.example"]}}
"""

ARF_THREE = """
From: feedback@isp.example
To: abuse@outreach.example
Subject: Abuse report
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="F"

--F
Content-Type: text/plain

Three of our users reported this message.

--F
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: ISP-FBL/1.0
Version: 1
Original-Rcpt-To: a@lead.example
Original-Rcpt-To: b@lead.example
Original-Rcpt-To: <c@lead.example>

--F
Content-Type: text/rfc822-headers

Message-ID: <20261201.abc123@mail.outreach.example>
From: anna@outreach.example
Subject: Quick question

--F--
"""

JMRP = f"""
From: staff@hotmail.com
To: abuse@outreach.example
Subject: complaint about message from 192.0.2.1
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="J"

--J
Content-Type: message/rfc822
Content-Disposition: inline

X-HmXmrOriginalRecipient: lead@outlook.example
To: lead@outlook.example
From: Anna <anna@outreach.example>
Message-ID: {OURS}
Subject: Quick question

Hello
--J--
"""

SES_COMPLAINT = """
From: SES <no-reply@sns.amazonaws.example>
To: ops@outreach.example
Subject: AWS Notification Message
Content-Type: text/plain; charset=UTF-8

{"notificationType":"Complaint","complaint":{"complainedRecipients":[{"emailAddress":"lead@yahoo.example"}],
"complaintFeedbackType":"abuse"},"mail":{"messageId":"x"}}
"""

APPLE_ONE_TAP = """
From: lead@icloud.example
To: unsub-list@outreach.example
Subject: unsubscribe
X-Apple-Unsubscribe: true
Content-Type: text/plain

This message was automatically generated by Mail.
"""


def test_a_bounce_with_re_and_our_in_reply_to_is_never_a_reply():
    inbound, v = classify(_raw(VERIZON_RE))
    assert inbound.in_reply_to == (OURS.strip("<>"),)
    assert (v.kind, v.addresses, v.reason, v.owner) == (
        "hard_bounce", ("gone@lead.example",), "userunknown", "address"), v


def test_a_plain_text_exim_bounce_without_x_failed_recipients_is_a_bounce_of_our_email():
    # Issue 23's black-box case: no daemon sender, no null Return-Path, a subject of its own,
    # only Auto-Submitted says a machine wrote it (it was recorded as an auto-reply).
    _i, v = classify(_raw(EXIM_PLAIN))
    assert (v.kind, v.addresses, v.original_ids) == (
        "hard_bounce", ("gone@lead.example",), (OURS.strip("<>"),)), v


def test_a_dmarc_reject_in_plain_text_is_a_sender_block():
    _i, v = classify(_raw(DRAGONFLY_DMARC))
    assert (v.kind, v.addresses, v.dsn_status, v.reason, v.owner) == (
        "sender_block", ("lead@gmail.example",), "5.7.26", "authfailure", "sender"), v
    assert "DMARC policy" in (v.diagnostic or "")


def test_a_bounce_naming_no_one_is_read_from_the_returned_message():
    _i, v = classify(_raw(V5_SENDMAIL))
    assert (v.kind, v.addresses) == ("soft_bounce", ("lead@lead.example",)), v
    assert v.reason == "expired"


def test_a_multipart_whose_boundary_never_occurs_is_still_read():
    _i, v = classify(_raw(BROKEN_BOUNDARY))
    assert (v.kind, v.addresses, v.dsn_status, v.reason) == (
        "hard_bounce", ("gone@lead.example",), "5.1.1", "userunknown"), v


def test_each_recipient_of_a_dsn_has_its_own_outcome():
    _i, v = classify(_raw(TWO_OUTCOMES))
    assert v.kind == "hard_bounce" and v.addresses == ("gone@lead.example", "full@lead.example")
    assert [(f.address, f.status, f.reason, f.owner) for f in v.failures] == [
        ("gone@lead.example", "5.1.1", "userunknown", "address"),
        ("full@lead.example", "5.2.2", "mailboxfull", "transient")]


def test_a_delay_warning_is_a_delivery_report_that_names_no_failure():
    _i, v = classify(_raw(DELAYED))
    assert (v.kind, v.addresses, v.owner) == ("delivery_report", (), "none"), v
    assert [(f.address, f.action) for f in v.failures] == [("slow@lead.example", "delayed")]


def test_a_japanese_mailbox_full_notice_is_a_soft_bounce():
    _i, v = classify(_raw(KDDI_FULL))
    assert (v.kind, v.addresses, v.reason) == ("soft_bounce", ("lead@ezweb.example.jp",), "mailboxfull"), v
    assert v.original_ids == (OURS.strip("<>"),)


def test_an_ses_bounce_notification_delivered_as_mail():
    _i, v = classify(_raw(SES_BOUNCE))
    assert (v.kind, v.addresses, v.dsn_status) == ("hard_bounce", ("gone@lead.example",), "5.1.1"), v


def test_an_arf_report_lists_every_complainant():
    _i, v = classify(_raw(ARF_THREE))
    assert (v.kind, v.addresses) == ("complaint", ("a@lead.example", "b@lead.example", "c@lead.example"))
    assert (v.reason, v.owner, v.original_ids) == ("feedback", "none", (OURS.strip("<>"),))


@pytest.mark.parametrize("raw, complainant, evidence", [
    (JMRP, "lead@outlook.example", "JMRP"),
    (SES_COMPLAINT, "lead@yahoo.example", "SES"),
    (APPLE_ONE_TAP, "lead@icloud.example", "X-Apple-Unsubscribe"),
], ids=["jmrp", "ses", "apple-one-tap"])
def test_complaints_beyond_arf(raw, complainant, evidence):
    _i, v = classify(_raw(raw))
    assert (v.kind, v.addresses, v.reason) == ("complaint", (complainant,), "feedback"), v
    assert evidence in v.evidence


def test_flufl_bounce_says_nothing_at_info(caplog):
    with caplog.at_level(logging.INFO):
        classify(_raw(DRAGONFLY_DMARC))  # no DSN fields: flufl.bounce runs
    assert not [r for r in caplog.records if r.name.startswith("flufl")], caplog.text


@pytest.mark.parametrize("status, diagnostic, reason", [
    ("4.0.0", "DNS type 'mx' lookup of lead.example responded with code NXDOMAIN Domain name "
              "not found", "networkerror"),
    ("5.6.0", "550 5.6.0 <x@lead.example>: Recipient address rejected: Media error", "contenterror"),
    ("5.2.1", "550 5.2.1 <x@lead.example>... User Unknown", "userunknown"),
    ("5.1.1", "550 5.1.1 <x@lead.example>: Recipient address rejected: Access denied", "userunknown"),
    (None, "554 delivery error: This user doesn't have a lead.example account", "userunknown"),
    ("5.7.1", "550 5.7.1 Message content rejected, UBE, id=0000", "spamdetected"),
], ids=["4xx-nxdomain", "rejected-media", "521-user-unknown", "511-decides", "yahoo-dd", "ube"])
def test_words_decide_before_a_weak_status(status, diagnostic, reason):
    assert reason_of(status, diagnostic) == reason


MARSHAL_WORDS_ABOVE = """
From: MailMarshal <postmaster@gw.lead.example>
To: anna@outreach.example
Subject: Undeliverable Mail
Content-Type: text/plain

Your message:
   From:    anna@outreach.example
   Subject: Quick question

Could not be delivered because of

550 5.1.1 User unknown

The following recipients were affected:
    gone@lead.example

Additional Information
======================
Original Sender:    <anna@outreach.example>
Reporting-MTA:      <gw.lead.example>
"""


def _dsn(diagnostic: str, status: str, text: str = "") -> bytes:
    return _raw(f"""
Return-Path: <>
From: MAILER-DAEMON@mx.outreach.example
To: anna@outreach.example
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="B"

--B
Content-Type: text/plain

{text or "Your message could not be delivered."}

--B
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.outreach.example

Final-Recipient: rfc822; x@lead.example
Action: failed
Status: {status}
Diagnostic-Code: smtp; {diagnostic}

--B--
""")


def test_words_above_the_only_recipient_give_its_reason():
    _i, v = classify(_raw(MARSHAL_WORDS_ABOVE))
    assert (v.kind, v.addresses, v.reason) == ("hard_bounce", ("gone@lead.example",), "userunknown"), v


def test_user_unknown_under_a_filter_status_suppresses_only_when_said_to_rcpt():
    _i, filtered = classify(_dsn("550 5.2.1 <x@lead.example>... User Unknown", "5.2.1"))
    _i, at_rcpt = classify(_dsn("550 5.2.1 <x@lead.example>... User Unknown", "5.2.1",
                                "<x@lead.example>: host mx.lead.example said: 550 5.2.1 User Unknown "
                                "(in reply to RCPT TO command)"))
    _i, qmail = classify(_dsn("550 5.2.1 <x@lead.example>... User Unknown", "5.2.1",
                              "<x@lead.example>: 192.0.2.1 does not like recipient.\nRemote host "
                              "said: 550 5.2.1 <x@lead.example>... User Unknown"))
    assert (filtered.kind, filtered.reason) == ("sender_block", "filtered"), filtered
    assert (at_rcpt.kind, at_rcpt.reason) == ("hard_bounce", "userunknown"), at_rcpt
    assert (qmail.kind, qmail.reason) == ("hard_bounce", "userunknown"), qmail


@pytest.mark.parametrize("status, diagnostic, reason", [
    ("5.4.1", "550 5.4.1 <x@lead.example>: Recipient address rejected: Access denied [EOP]",
     "userunknown"),
    (None, "User some.name (x@lead.example) not listed in Domino Directory", "userunknown"),
    ("5.2.0", "550 5.2.0 Message Filtered", "filtered"),
    ("5.1.1", "550 5.1.1 <x@lead.example> - 203.0.113.1 has sent to too many recipients this hour",
     "speeding"),
    ("5.4.4", "Name service error for name=lead.example type=MX: Malformed or unexpected name "
              "server reply", "networkerror"),
    (None, "SMTP error from remote mail server after end of data: 553 mx.lead.example does not "
           "exist", "hostunknown"),
    ("5.1.0", "550 5.1.0 <bounce@mailer.outreach.example> sender rejected. AUP#CXSNDR", "rejected"),
    ("5.2.3", "552 5.2.3 Message size exceeds fixed maximum message size", "exceedlimit"),
    ("5.0.0", "550 Ip frequency limited [Blocked IP 192.0.2.22]", "toomanyconn"),
    ("4.7.650", "451 4.7.650 The mail server has been temporarily rate limited due to IP "
                "reputation.", "badreputation"),
    ("5.5.0", "550 5.5.0 The recipient account is blocked.", "suspend"),
    ("5.4.316", "550 5.4.316 Message expired, connection refused", "expired"),
    ("5.0.0", "The email account that you tried to reach does not exist.", "userunknown"),
], ids=["exchange-online-dbeb", "domino-not-listed", "message-filtered", "rate-over-511",
        "resolver-over-544", "host-does-not-exist", "sender-rejected", "523-decides",
        "frequency-limited", "ip-reputation", "account-blocked", "expired-refused",
        "gmail-does-not-exist"])
def test_words_that_looked_like_a_block(status, diagnostic, reason):
    assert reason_of(status, diagnostic) == reason


CONTACT_NAMED = """
Return-Path: <>
From: MAILER-DAEMON@mx.isp.example
To: anna@outreach.example
Subject: Undelivered Mail Returned to Sender

I'm sorry to have to inform you that the message returned
below could not be delivered to one or more destinations.

For further assistance, please contact <support@isp.example>

解決できない場合は、<support@isp.example>へご連絡ください。

<gone@lead.example>: host mx.lead.example[192.0.2.22] said: 550
    <gone@lead.example>: User unknown (in reply to RCPT TO command)
"""


def test_an_address_given_as_a_contact_is_not_a_failed_recipient():
    _i, v = classify(_raw(CONTACT_NAMED))
    assert (v.kind, v.addresses) == ("hard_bounce", ("gone@lead.example",)), v


@pytest.mark.parametrize("final, address", [
    ('rfc822; "first..last."@lead.example', '"first..last."@lead.example'),
    ("rfc822; =?utf-8?B?8J+Qsg==?=@lead.example", "=?utf-8?b?8j+qsg==?=@lead.example"),
], ids=["quoted-local-part", "encoded-word-local-part"])
def test_a_dsn_recipient_is_kept_as_written(final, address):
    raw = _dsn("550 5.1.1 User unknown", "5.1.1").replace(b"rfc822; x@lead.example", final.encode())
    _i, v = classify(raw)
    assert v.addresses == (address,), v


def test_a_carriers_after_data_user_unknown_is_a_filter():
    _i, v = classify(_dsn("550 : User unknown", "5.0.0"))
    assert (v.kind, v.reason) == ("sender_block", "filtered"), v


def test_each_dsn_recipient_gets_only_its_own_line_of_the_notice():
    # OpenSMTPD: the DSN has no Diagnostic-Code; the notice lists each recipient's reply.
    raw = TWO_OUTCOMES.replace("Two recipients failed.", (
        "gone@lead.example: 550 5.1.1 <gone@lead.example>: User unknown\n"
        "full@lead.example: 552 5.2.2 <full@lead.example>: Mailbox full"))
    raw = "\n".join(line for line in raw.splitlines() if not line.startswith("Diagnostic-Code"))
    _i, v = classify(_raw(raw.replace("Status: 5.2.2", "Status: 5.0.0")))
    assert [(f.address, f.reason) for f in v.failures] == [
        ("gone@lead.example", "userunknown"), ("full@lead.example", "mailboxfull")], v


def test_a_bounce_returned_inside_a_bounce_names_only_the_outer_recipients():
    inner = TWO_OUTCOMES.split("MIME-Version: 1.0\n", 1)[1].replace('boundary="B"', 'boundary="I"')
    inner = inner.replace("--B", "--I").replace("gone@lead.example", "old@other.example")
    outer = DELAYED.replace("Action: delayed", "Action: failed").replace("Status: 4.4.1", "Status: 5.1.1")
    outer = outer.replace("--B--", "--B\nContent-Type: message/rfc822\n\nFrom: a@b.example\n"
                          "MIME-Version: 1.0\n" + inner + "\n--B--")
    _i, v = classify(_raw(outer))
    assert v.addresses == ("slow@lead.example",), v


def test_user_unknown_with_no_status_and_no_stage_is_a_filter():
    # McAfee, SurfControl, m-FILTER: a gateway's "No such user" under 5.0.0 (or no status), with
    # nothing telling the SMTP stage: sisimai calls it "filtered"; we do not suppress on it.
    _i, v = classify(_dsn("550 x@lead.example... No such user", "5.0.0"))
    assert (v.kind, v.reason) == ("sender_block", "filtered"), v


def test_user_unknown_said_to_rcpt_under_5_0_0_is_a_gone_address():
    _i, v = classify(_dsn("550 x@lead.example... No such user", "5.0.0",
                          "<x@lead.example>: host mx.lead.example said: 550 No such user "
                          "(in reply to RCPT TO command)"))
    assert (v.kind, v.reason) == ("hard_bounce", "userunknown"), v


def test_a_sendmail_transcript_refused_at_data_is_a_filter_even_if_it_mentions_rcpt():
    # The last command of the transcript decides: ">>> DATA"; "503 Need RCPT" names no stage.
    _i, v = classify(_dsn("550 5.0.0 <x@lead.example>... User unknown", "5.0.0",
                          "----- Transcript of session follows -----\n>>> DATA\n"
                          "<<< 550 5.0.0 <x@lead.example>... User unknown\n"
                          "<<< 503 5.0.0 Need RCPT (recipient)"))
    assert (v.kind, v.reason) == ("sender_block", "filtered"), v


@pytest.mark.parametrize("diagnostic", [
    "x@lead.example on Thu, 29 Apr 2010 00:00:00 -0000 The recipient name is not recognized",
    "Invalid final delivery userid: x@lead.example",
    "Your message wasn't delivered to x@lead.example because the address couldn't be found.",
    "554 delivery error: dd This user doesn't have a lead.example account (x@lead.example) [0]",
], ids=["exchange-2003", "imail", "microsoft", "yahoo-dd"])
def test_an_mtas_own_unknown_user_words_suppress_at_any_stage(diagnostic):
    _i, v = classify(_dsn(diagnostic, "5.0.0"))
    assert (v.kind, v.reason) == ("hard_bounce", "userunknown"), v


def test_a_domain_that_takes_no_mail_under_a_4xx_status_is_not_suppressed():
    _i, v = classify(_dsn("DNS Error: DNS type 'mx' lookup of lead.example responded with code "
                          "NOERROR The domain lead.example doesn't receive email", "4.0.0"))
    assert v.kind == "soft_bounce", v


@pytest.mark.parametrize("status, diagnostic, reason", [
    ("5.1.1", 'procmail: Couldn\'t create "/var/spool/mail/x" id: r.lead.example: No such user',
     "mailererror"),
    (None, "554 <x@lead.example>... Remote protocol error: Connection reset by peer 550 "
           "lead.example (smtp)... 550 Host unknown", "blocked"),
], ids=["procmail", "remote-protocol-error"])
def test_words_of_a_local_mailer_or_a_broken_session(status, diagnostic, reason):
    assert reason_of(status, diagnostic) == reason


@pytest.mark.parametrize("notice, reason", [
    ("Your message to <x> was automatically rejected:\nNot enough disk space", "mailboxfull"),
    ("The user(s) account is disabled.", "suspend"),
], ids=["disk-space", "account-disabled"])
def test_the_notices_words_for_its_only_recipient_outweigh_a_relayed_user_unknown(notice, reason):
    _i, v = classify(_dsn("550 5.1.1 <x@lead.example>... User Unknown", "5.1.1", notice))
    assert (v.kind, v.reason) == ("soft_bounce", reason), v


def test_messaging_servers_rejected_address_is_an_answer_to_rcpt():
    _i, v = classify(_dsn("550 <x@lead.example>: User unknown",
                          "5.0.0 (Remote SMTP server has rejected address)",
                          "Reason: Remote SMTP server has rejected address"))
    assert (v.kind, v.reason) == ("hard_bounce", "userunknown"), v


EXIM_LISTED = """
From: Mail Delivery System <Mailer-Daemon@mx.outreach.example>
To: anna@outreach.example
X-Failed-Recipients: gone@lead.example
Subject: Mail delivery failed: returning message to sender

This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  gone@lead.co.example
    SMTP error from remote mail server after RCPT TO:<gone@lead.co.example>:
    host mx.lead.co.example [192.0.2.20]: 550 5.1.1 User unknown

------ This is a copy of the message, including all the headers. ------

To: gone@lead.co.example
"""


def test_exims_own_list_of_failed_addresses_outweighs_its_header():
    _i, v = classify(_raw(EXIM_LISTED))
    assert v.addresses == ("gone@lead.co.example",), v


EXIM_MALFORMED = """
From: Mail Delivery System <Mailer-Daemon@mx.outreach.example>
To: anna@outreach.example
Subject: Mail delivery failed: returning message to sender

A message that you sent contained one or more recipient addresses that were
incorrectly constructed:

  first@lead.example <second@lead.example>: malformed address: <second@lead.example> may not follow first@lead.example

This address has been ignored.
"""


def test_an_address_written_as_the_display_name_is_not_a_recipient():
    _i, v = classify(_raw(EXIM_MALFORMED))
    assert v.addresses == ("second@lead.example",), v


FML_NOT_MEMBER = """
From: list-admin@lists.lead.example
To: anna@outreach.example
Subject: You anna@outreach.example are not member (team ML)
X-MLServer: fml [fml 4.0.3 release (20011202/4.0.3)]
List-Subscribe: <mailto:team-ctl@lists.lead.example?body=subscribe>

You are not a member of this mailing list <team@lists.lead.example>.

If you know the general guide of this list, please send mail with
the mail body

\tguide

to the address

\tteam-ctl@lists.lead.example
"""


def test_a_lists_control_address_from_its_own_headers_is_not_a_recipient():
    _i, v = classify(_raw(FML_NOT_MEMBER))
    assert v.addresses == ("team@lists.lead.example",), v


FML_DUPLICATE = """
From: list-admin@lists.lead.example
To: list-admin@lists.lead.example
Subject: fml status report
X-MLServer: fml [fml 4.0.3 release (20011202/4.0.3)]

Duplicated Message-ID in <team@lists.lead.example>.


Original mail as follows:

   From owner-team@lists.lead.example  Thu Apr 29 23:34:45 2017
   Return-Path: <owner-team@lists.lead.example>
   From: someone@other.example
   To: <member@other.example>
"""


def test_fmls_original_mail_as_follows_starts_the_returned_message():
    _i, v = classify(_raw(FML_DUPLICATE))
    assert v.addresses == ("team@lists.lead.example",), v
