"""The inbound benchmark's scorer (bench/bench_inbound.py) on four hand-written messages whose
facts we set ourselves: each figure of the table counts what it says it counts."""

from __future__ import annotations

import pytest

from outreach.inbound import classify
from support.paths import ROOT
from unit.test_bounce_recognition import ARF_THREE, DRAGONFLY_DMARC, TWO_OUTCOMES, _raw

HUMAN = b"From: lead@lead.example\r\nTo: anna@outreach.example\r\nSubject: Re: hi\r\n\r\nYes, call me.\r\n"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_inbound

    return bench_inbound


def _r(address, reason, hard, status=None):
    return {"address": address, "reason": reason, "hardbounce": hard, "status": status}


FACTS = {
    # Both recipients right: one address gone (suppressed, hard), one mailbox full.
    "two.eml": {"class": "bounce", "recipients": [_r("gone@lead.example", "userunknown", True),
                                                  _r("full@lead.example", "mailboxfull", False)]},
    # Say sisimai called the DMARC reject "userunknown", hard: our owner (sender) disagrees, and
    # the hard bounce is not suppressed (a recall miss).
    "dmarc.eml": {"class": "bounce", "recipients": [_r("lead@gmail.example", "userunknown", True)]},
    # A complaint with a fourth complainant we do not find: not whole.
    "arf.eml": {"class": "complaint", "recipients": [
        _r(a, "feedback", False) for a in ("a@lead.example", "b@lead.example", "c@lead.example",
                                           "d@lead.example")]},
    # A "bounce" that is a person's reply: read as a reply, not recognised.
    "human.eml": {"class": "bounce", "recipients": [_r("lead@lead.example", "userunknown", True)]},
    "unknown.eml": {"class": "unknown", "recipients": []},
}


def test_the_scorer_counts_each_figure(bench):
    raw = {"two.eml": _raw(TWO_OUTCOMES), "dmarc.eml": _raw(DRAGONFLY_DMARC),
           "arf.eml": _raw(ARF_THREE), "human.eml": HUMAN}
    verdicts = {n: classify(r)[1] for n, r in raw.items()}
    s = bench.score(FACTS, verdicts, errors={"unknown.eml"})
    assert (s.bounces, s.recognised, s.as_reply) == (3, 2, 1)
    assert (s.recipient_scored, s.recipient_exact) == (2, 2)
    assert (s.owner_scored, s.owner_agree) == (3, 2)
    assert (s.suppressed, s.suppressed_hard, s.hard, s.hard_suppressed) == (1, 1, 2, 1)
    assert (s.complaints, s.complaints_whole, s.exceptions) == (1, 0, 1)
    assert s.misses["bounce not recognised"] == ["human.eml (reply)"]
    assert s.misses["suppression recall"] == ["dmarc.eml ours=sender sisimai=userunknown"]


def test_the_table_says_what_is_met(bench):
    s = bench.Score(bounces=100, recognised=98, recipient_scored=98, recipient_exact=97,
                    owner_scored=100, owner_agree=95, suppressed=100, suppressed_hard=98, hard=50,
                    hard_suppressed=47, complaints=18, complaints_whole=18, messages=400, seconds=2.0)
    met = {row[0]: row[3] for row in bench.table(s)}
    assert met["bounces recognised"] and met["owner agrees with sisimai's reason"]
    assert not met["recipient exact"]  # 97/98 is 98.98 %: under 99 %
    assert not met["suppression precision"]  # 98/100: under 99 %
    assert not met["suppression recall"]  # 47/50 = 94 %
    assert met["messages/s"] and met["complaints with every complainant"]
