"""The one rule for "MAIL FROM refused because the session may not send"
(outreach.transport.session_refusal; RFC 4954 §6, RFC 3207 §4): what it matches, and that it
stays narrow (a policy rejection or a reply at another stage is still the message's)."""

from __future__ import annotations

import pytest

from outreach.transport import Delivery, Outcome, Stage, session_refusal


def reply(stage: Stage, code: int, text: str) -> Delivery:
    return Delivery(Outcome.PERMANENT, stage, code, text)


@pytest.mark.parametrize(("code", "text", "why"), [
    (530, "5.7.0 Authentication required", "the server requires authentication"),  # RFC 4954 §6
    (530, "5.7.0 Authentication Required. Learn more at https://support.google.com/mail",
     "the server requires authentication"),
    (530, "5.7.57 Client not authenticated to send mail", "the server requires authentication"),
    (550, "5.7.0 Authentication required", "the server requires authentication"),
    (530, "5.7.0 Must issue a STARTTLS command first", "the server requires STARTTLS"),  # RFC 3207
])
def test_a_session_refusal_at_mail_is_the_mailboxs(code, text, why):
    assert session_refusal(reply(Stage.MAIL, code, text)) == why


@pytest.mark.parametrize(("stage", "code", "text"), [
    (Stage.RCPT, 530, "5.7.0 Authentication required"),      # not at MAIL
    (Stage.END_OF_DATA, 530, "5.7.0 Authentication required"),
    (Stage.MAIL, 553, "5.7.1 Sender address rejected: not owned by user"),  # policy, 5.7.1
    (Stage.MAIL, 550, "5.7.0 sender blocked"),                 # 5.7.0 without "auth"
    (Stage.MAIL, 550, "5.1.0 Authentication of sender domain failed"),  # not 5.7.0
    (Stage.MAIL, 451, "4.7.0 Authentication temporarily unavailable"),  # 4xx: a retry
])
def test_other_replies_stay_the_messages(stage, code, text):
    assert session_refusal(reply(stage, code, text)) is None


def test_no_reply_is_not_a_refusal():
    assert session_refusal(Delivery(Outcome.RETRY, Stage.MAIL, None, "connection reset")) is None
