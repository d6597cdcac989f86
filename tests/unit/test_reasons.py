"""The one vocabulary of delivery-failure reasons and their owners (outreach.reasons)."""

from __future__ import annotations

import pytest

from outreach.reasons import REASONS, owner_of, reason_of


@pytest.mark.parametrize(("status", "diagnostic", "code", "reason"), [
    ("5.1.1", "550 5.1.1 <x@example.com>: Recipient address rejected: User unknown", 550, "userunknown"),
    ("5.7.26", "550 5.7.26 Unauthenticated email from example.com is not accepted due to domain's "
     "DMARC policy", 550, "authfailure"),
    ("5.7.1", "554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org",
     554, "blocked"),
    ("5.2.2", "552 5.2.2 Mailbox full", 552, "mailboxfull"),
    (None, "452 4.2.2 The email account that you tried to reach is over quota", 452, "mailboxfull"),
    ("5.7.1", "550 5.7.1 Message rejected as spam", 550, "spamdetected"),
    ("5.0.0", "550 something we cannot tell", 550, "undefined"),
    ("4.0.0", "451 try later", 451, "delayed"),
])
def test_reason_of(status, diagnostic, code, reason):
    assert reason_of(status, diagnostic, code) == reason


def test_owners_decide_the_effect():
    assert owner_of("userunknown") == "address"
    assert owner_of("authfailure") == "sender"
    assert owner_of("blocked") == "sender"
    assert owner_of("mailboxfull") == "transient"
    assert owner_of("feedback") == "none"
    assert owner_of("no-such-reason") == "transient"
    assert set(REASONS.values()) == {"address", "sender", "transient", "none"}


def test_a_dsn_verdict_carries_reason_owner_and_diagnostic():
    from outreach.inbound import classify

    raw = (b"From: MAILER-DAEMON@mx.example.net\r\nTo: sender@example.com\r\n"
           b"Subject: Undelivered Mail Returned to Sender\r\nMessage-ID: <dsn1@mx.example.net>\r\n"
           b"MIME-Version: 1.0\r\n"
           b"Content-Type: multipart/report; report-type=delivery-status; boundary=\"b\"\r\n\r\n"
           b"--b\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n"
           b"--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n\r\n"
           b"Final-Recipient: rfc822; lead@example.org\r\nAction: failed\r\nStatus: 5.7.26\r\n"
           b"Diagnostic-Code: smtp; 550 5.7.26 Unauthenticated email is not accepted due to\r\n"
           b" the sender domain's DMARC policy\r\n\r\n--b--\r\n")
    _inbound, verdict = classify(raw)
    assert (verdict.reason, verdict.owner) == ("authfailure", "sender")
    assert verdict.diagnostic is not None and "DMARC policy" in verdict.diagnostic
