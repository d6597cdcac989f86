"""The operator alerts' address and the decoded subject of an alert as it arrived."""

from __future__ import annotations

OPS = "ops@outreach-test.example"


def subject_of(message) -> str:
    from email.header import decode_header, make_header

    return str(make_header(decode_header(message["Subject"])))
