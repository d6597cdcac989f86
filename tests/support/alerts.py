"""The operator alerts' address, and the decoded subject and text of an alert as it arrived."""

from __future__ import annotations

OPS = "ops@outreach-test.example"


def subject_of(message) -> str:
    from email.header import decode_header, make_header

    return str(make_header(decode_header(message["Subject"])))


def text_of(message) -> str:
    """The decoded text of every text part of an alert (its body as the operator reads it)."""
    import email
    import email.policy

    parsed = email.message_from_bytes(message.as_bytes(), policy=email.policy.default)
    return "\n".join(part.get_content() for part in parsed.walk()
                     if part.get_content_maintype() == "text")
