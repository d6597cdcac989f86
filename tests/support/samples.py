"""A sample rendering context and message envelope, shared by the message, DKIM and header tests."""

from __future__ import annotations

import datetime as dt

from outreach.message import Envelope

URL = "https://unsubscribe.test.example/unsubscribe/" + "T" * 120
CTX = {"lead": {"first_name": "Zoë", "last_name": "O'Neill", "company": "Acme & Sons",
                "title": "COO", "email": "zoe@acme.example"},
       "sender": {"name": "Anna", "address": "anna@mail.example"},
       "campaign": {"key": "c", "name": "C"}, "step": 1, "unsubscribe_url": URL}


def envelope(**kw) -> Envelope:
    base = dict(from_address="anna@mail.example", from_name="Anna Schmidt",
                to_address="zoe@acme.example", to_name="Zoë O'Neill",
                message_id="6f1c@mail.example", date=dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC),
                unsubscribe_url=URL, unsubscribe_mailto="mailto:unsubscribe@mail.example?subject=u%20" + "T" * 120,
                feedback_id="c:m1:cold:outreach", step_tag="c/1")
    base.update(kw)
    return Envelope(**base)
