"""The classifier alone (no server): the order of the rules and the forms each one knows."""

from __future__ import annotations

import pytest

from outreach.inbound import classify
from support.inboxflow import BOUNCE_SAMPLES, arf_report, bounce_sample, mail


@pytest.mark.parametrize("name, address, mta, kind", BOUNCE_SAMPLES, ids=[s[2] for s in BOUNCE_SAMPLES])
def test_real_mta_bounces(name, address, mta, kind):
    _inbound, verdict = classify(bounce_sample(name, address, "lead@x.example").encode("latin-1"))
    named = tuple(f.address for f in verdict.failures)
    assert (verdict.kind, named) == (kind, ("lead@x.example",)), verdict
    assert verdict.addresses == (() if kind == "delivery_report" else named)


def test_a_bounce_that_is_also_auto_submitted_is_a_bounce_first():
    raw = bounce_sample("dsn_11.txt", "joem@example.com", "lead@x.example")
    _i, verdict = classify(("Auto-Submitted: auto-replied\n" + raw).encode("latin-1"))
    assert verdict.kind == "hard_bounce" and verdict.dsn_status == "5.1.1"


def test_arf_report_is_a_complaint_about_the_original_recipient():
    _i, verdict = classify(arf_report("lead@x.example", "abc@mail.example").encode())
    assert (verdict.kind, verdict.addresses, verdict.original_ids) == (
        "complaint", ("lead@x.example",), ("abc@mail.example",))


@pytest.mark.parametrize("first_line", ["unsubscribe", "Please remove me from your list.",
                                        "Take me off this list", "STOP", "opt out",
                                        "Don't email me again", "Stop emailing me", "Bitte abmelden"])
def test_first_line_unsubscribe_requests(first_line):
    _i, verdict = classify(mail("lead@x.example", "Re: hi", first_line + "\n\n> quoted").encode())
    assert verdict.kind == "unsubscribe", first_line


def test_a_subject_that_only_starts_like_an_absence_is_a_reply():
    _i, verdict = classify(mail("lead@x.example", "Absence of data in your report", "Hi").encode())
    assert verdict.kind == "reply"


@pytest.mark.parametrize("body", ["Stop by our booth on Tuesday?", "I can't unsubscribe from work",
                                  "> unsubscribe\n\nInterested, call me."])
def test_replies_that_only_mention_the_words_are_replies(body):
    _i, verdict = classify(mail("lead@x.example", "Re: hi", body).encode())
    assert verdict.kind == "reply", body


def test_auto_submitted_no_is_a_person():
    _i, verdict = classify(mail("lead@x.example", "Re: hi", "Yes please",
                                headers={"Auto-Submitted": "no"}).encode())
    assert verdict.kind == "reply"


def test_demo_says_plainly_when_dovecot_is_missing(monkeypatch, tmp_path):
    import outreach.dev.devimap
    from outreach.dev.demo import _inbound_demo

    monkeypatch.setattr(outreach.dev.devimap, "dovecot_binary", lambda: None)
    lines = _inbound_demo("postgresql:///unused", {}, tmp_path, tmp_path)
    assert lines and lines[0].startswith("Inbound mail: SKIPPED - Dovecot is not installed")
    assert "apt-get install dovecot-imapd" in lines[0]
