"""The pure parts of the effects (outreach.bounces, outreach.inbox.automated): the class of a
verdict by owner, the likely fix of a block, the automated-message guard."""

from __future__ import annotations

import pytest

from outreach.bounces import BounceSettings, kind_of, likely_fix
from outreach.inbox import automated
from outreach.settings import SettingsError


@pytest.mark.parametrize("kind, owner, evidence, told, expected", [
    ("hard_bounce", "address", "", True, "hard_bounce"),
    ("hard_bounce", "sender", "Status 5.7.26, Action failed", True, "sender_block"),
    ("hard_bounce", "transient", "Status 5.2.2, Action failed", True, "soft_bounce"),
    ("soft_bounce", "transient", "Status 4.4.1, Action delayed", True, "delivery_report"),
    ("soft_bounce", "transient", "Status 2.0.0, Action relayed", True, "delivery_report"),
    ("hard_bounce", "transient", "flufl.bounce: permanent failure", False, "hard_bounce"),
    ("sender_block", "sender", "", True, "sender_block"),
    ("reply", None, "", True, "reply"),
    ("complaint", "none", "", True, "complaint"),
])
def test_kind_of(kind, owner, evidence, told, expected):
    assert kind_of(kind, owner, evidence, told=told) == expected


def test_likely_fix_names_dmarc_the_blocklist_and_ptr():
    assert "DMARC alignment of mail.example" in likely_fix("authfailure", "5.7.26 dmarc", "mail.example")
    fix = likely_fix("blocked", "554 5.7.1 blocked using zen.spamhaus.org", "mail.example")
    assert "spamhaus" in fix.lower()
    assert "PTR record" in likely_fix("requireptr", None, "mail.example")


def test_bounce_settings_refuse_out_of_range(monkeypatch):
    monkeypatch.setenv("OUTREACH_SOFT_BOUNCE_DAYS", "0")
    with pytest.raises(SettingsError, match="OUTREACH_SOFT_BOUNCE_DAYS"):
        BounceSettings()
    monkeypatch.setenv("OUTREACH_SOFT_BOUNCE_DAYS", "4")
    assert BounceSettings().soft_bounce_days == 4


@pytest.mark.parametrize("head, why", [
    ("Return-Path: <>\nFrom: x@y.example\n", "Return-Path: <>"),
    ("From: MAILER-DAEMON@mx.example\n", "From: mailer-daemon@…"),
    ("From: a@b.example\nContent-Type: multipart/report; report-type=delivery-status\n",
     "Content-Type: multipart/report"),
    ("From: a@b.example\nAuto-Submitted: auto-replied\n", "Auto-Submitted: auto-replied"),
    ("From: a@b.example\nX-Failed-Recipients: c@d.example\n", "X-Failed-Recipients: c@d.example"),
    ("From: a@b.example\nAuto-Submitted: no\n", ""),
    ("From: Pat <pat@b.example>\nSubject: Re: hello\nIn-Reply-To: <x@y>\n", ""),
])
def test_automated(head, why):
    assert automated((head + "\nbody\n").encode()) == why
