"""Provider match at enrolment (issue 25, item 3; migration 0145): with the campaign file's
`provider_match: true`, a lead whose mailbox provider (the MX cache, outreach.mx_providers) is a
mailbox's own gets that mailbox while it is open and within its share; off, the round robin by
lead id. Decided by enrollment_insert_staged in a real PostgreSQL; the messages are counted at a
real SMTP server."""

from __future__ import annotations

import datetime as dt
import threading
from email.utils import parseaddr
from pathlib import Path

import psycopg
import pytest

from outreach import campaign as campaign_mod
from outreach import db, mxproviders
from outreach.leads import import_leads
from outreach.queue import queue_due
from support.dnszone import dns_server, mx
from support.flow import leads_csv, rows, send_all
from support.paths import CAMPAIGN, MAILBOXES

ANNA = "anna.schmidt@mail.outreach-demo.example"
BEN = "ben.okafor@mail.outreach-demo.example"
# Leads get their ids in address order (lead_upsert_staged): these alternate Google, Microsoft.
GOOGLE = [f"p{i}a@goog.example" for i in range(4)]
MICROSOFT = [f"p{i}b@msft.example" for i in range(4)]


def _files(tmp_path: Path, *, match: bool, anna: str | None = "google",
           ben: str | None = None) -> tuple[Path, Path]:
    """The demo campaign (with `provider_match: true` when ``match``) and mailbox files, anna's
    and ben's `provider:` set when given."""
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(CAMPAIGN.read_text() + ("provider_match: true\n" if match else ""))
    text = MAILBOXES.read_text()
    for address, provider in ((ANNA, anna), (BEN, ben)):
        if provider:
            text = text.replace(f"  - address: {address}\n",
                                f"  - address: {address}\n    provider: {provider}\n")
    mailboxes = tmp_path / "mailboxes.yaml"
    mailboxes.write_text(text)
    return campaign, mailboxes


def _cache(db_url: str, *domains: tuple[str, str]) -> None:
    """Recipient domains in the MX cache, as outreach.mxproviders leaves them."""
    with psycopg.connect(db_url) as conn:
        for domain, provider in domains:
            conn.execute("INSERT INTO outreach.mx_providers (domain, provider, expires_at,"
                         " checked_at) VALUES (%s, %s, now() + interval '1 day', now())",
                         (domain, provider))


def _assigned(db_url: str) -> dict[str, str]:
    """Lead address → its enrolment's mailbox address, in lead id order."""
    return {r["email"]: r["address"] for r in rows(
        db_url, "SELECT l.email, m.address FROM outreach.enrollments en"
        " JOIN outreach.leads l ON l.id = en.lead_id"
        " JOIN outreach.mailboxes m ON m.id = en.mailbox_id ORDER BY l.id")}


def _interleaved() -> list[str]:
    return [a for pair in zip(GOOGLE, MICROSOFT, strict=True) for a in pair]


def _sent_from(sink) -> dict[str, str]:
    """Recipient → the mailbox address its message came from, at the SMTP server."""
    return {parseaddr(str(m["To"]))[1]: parseaddr(str(m["From"]))[1] for m in sink.messages()}


@pytest.mark.parametrize("match", [True, False], ids=["provider_match", "round_robin"])
def test_google_recipients_go_from_the_google_mailbox_when_matched(db_url, sink, settings,
                                                                   tmp_path, match):
    _cache(db_url, ("goog.example", "google"), ("msft.example", "microsoft"))
    campaign, mailboxes = _files(tmp_path, match=match)
    result = import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, _interleaved()))
    assert result.enrolled == 8
    assert queue_due(db_url)["queued"] == 8
    assert sum(s.sent for s in send_all(db_url, settings)) == 8
    sent = _sent_from(sink)
    assert sorted(sent) == sorted(GOOGLE + MICROSOFT)
    if match:
        # Anna (configured `provider: google`) takes every Google recipient: her share is 4 of
        # the 8; ben (an 'other' mailbox) the Microsoft ones.
        assert {sent[a] for a in GOOGLE} == {ANNA}
        assert {sent[a] for a in MICROSOFT} == {BEN}
    else:
        # Off: the round robin by lead id, as before 0145, whatever the providers (here every
        # Google lead has an odd id: none goes from anna).
        by_id = {r["email"]: r["mailbox_id"] for r in rows(
            db_url, "SELECT l.email, 1 + l.id %% 2 AS mailbox_id FROM outreach.leads l")}
        assert {a: {1: ANNA, 2: BEN}[by_id[a]] for a in sent} == sent
        assert ANNA not in {sent[a] for a in GOOGLE}


def test_a_matched_mailbox_takes_no_more_than_its_share(db_url, tmp_path):
    _cache(db_url, ("goog.example", "google"), ("msft.example", "microsoft"))
    campaign, mailboxes = _files(tmp_path, match=True)
    # The Microsoft leads sort first (get the lowest ids): the round robin or a plain fill in
    # lead order would give anna some of them.
    six_google = MICROSOFT[:2] + [f"q{i}@goog.example" for i in range(6)]
    import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, six_google))
    got = _assigned(db_url)
    # 8 leads, two mailboxes: anna's share is 4, all Google; the rest fill ben's share.
    assert sorted(got.values()) == [ANNA] * 4 + [BEN] * 4
    assert all(a.endswith("@goog.example") for a, box in got.items() if box == ANNA)
    # A second import counts the enrolments already there (4 and 4): 8 more leads make each
    # share 8 of 16, so anna has room for 4: the 4 new Google leads.
    more = [f"r{i}@msft.example" for i in range(4)] + [f"s{i}@goog.example" for i in range(4)]
    import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, more, name="more.csv"))
    got = _assigned(db_url)
    assert sorted(got.values()) == [ANNA] * 8 + [BEN] * 8
    assert all(a.endswith("@goog.example") for a, box in got.items() if box == ANNA)
    # A lead keeps its mailbox when imported again.
    import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, six_google, name="again.csv"))
    assert _assigned(db_url) == got


@pytest.mark.parametrize("how", ["paused", "frozen"])
def test_a_paused_or_frozen_mailbox_is_not_matched(db_url, tmp_path, how):
    _cache(db_url, ("goog.example", "google"), ("msft.example", "microsoft"))
    campaign, mailboxes = _files(tmp_path, match=True)
    if how == "frozen":  # the mailbox file's freeze, around today
        today = dt.datetime.now(dt.UTC).date()
        frozen = (f"    freeze: {{from: {today - dt.timedelta(days=1)},"
                  f" to: {today + dt.timedelta(days=1)}}}\n")
        mailboxes.write_text(mailboxes.read_text().replace(
            f"  - address: {ANNA}\n", f"  - address: {ANNA}\n{frozen}"))
    with db.connect(db_url) as conn, conn.transaction():
        campaign_mod.sync(conn, campaign_mod.load_campaign(campaign),
                          campaign_mod.load_mailboxes(mailboxes), str(campaign))
    if how == "paused":  # a sync never touches the pause
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE outreach.mailboxes SET status = 'paused' WHERE address = %s",
                         (ANNA,))
    import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, _interleaved()))
    # Anna matches nobody: the leads fill the shares in lead order (4 and 4), as without the
    # match: a paused or frozen mailbox still holds its share, for later.
    got = _assigned(db_url)
    assert list(got.values()) == [ANNA] * 4 + [BEN] * 4
    assert {got[a] for a in GOOGLE} == {ANNA, BEN}


def test_the_mailbox_provider_comes_from_its_domains_mx(db_url, sink, settings, tmp_path):
    """No `provider:` for anna: her domain's MX (looked up by outreach.mxproviders, which now
    also asks the domains of a provider_match campaign's mailboxes) says Google; ben is
    configured `other`, so the shared domain's answer does not make him Google too."""
    _cache(db_url, ("goog.example", "google"), ("msft.example", "microsoft"))
    campaign, mailboxes = _files(tmp_path, match=True, anna=None, ben="other")
    with db.connect(db_url) as conn, conn.transaction():
        campaign_mod.sync(conn, campaign_mod.load_campaign(campaign),
                          campaign_mod.load_mailboxes(mailboxes), str(campaign))
    zone = [mx("mail.outreach-demo.example", "aspmx.l.google.com")]
    with dns_server(zone) as ns:
        assert mxproviders.refresh(db_url, nameserver=ns)["looked_up"] == 1
    import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, _interleaved()))
    got = _assigned(db_url)
    assert {got[a] for a in GOOGLE} == {ANNA}
    assert {got[a] for a in MICROSOFT} == {BEN}


def test_concurrent_imports_keep_each_mailbox_within_its_share(db_url, tmp_path):
    """Six imports of one Google lead each, at once: the sync's campaign row lock serializes
    their enrolments, so each counts the ones before it (share ceil(n / 2)) and anna ends with
    her share, 3 of 6; imports that did not see each other would all find her room free."""
    _cache(db_url, ("goog.example", "google"))
    campaign, mailboxes = _files(tmp_path, match=True)
    with db.connect(db_url) as conn, conn.transaction():
        campaign_mod.sync(conn, campaign_mod.load_campaign(campaign),
                          campaign_mod.load_mailboxes(mailboxes), str(campaign))
    files = [leads_csv(tmp_path, [f"g{k}@goog.example"], name=f"{k}.csv") for k in range(6)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(files))

    def run(path: Path) -> None:
        try:
            start.wait()
            import_leads(db_url, campaign, mailboxes, path)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f,)) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(_assigned(db_url).values()) == [ANNA] * 3 + [BEN] * 3


def test_leads_skipped_for_overlap_take_no_matched_room(db_url, tmp_path):
    """With `overlap: skip`, a lead already in another campaign's sequence is enrolled stopped:
    it must not use up a matched mailbox's share, or the Google leads that do start go from the
    other mailbox while anna has room (here g0, g1 are in the other campaign; g2, g3 start)."""
    _cache(db_url, ("goog.example", "google"))
    campaign, mailboxes = _files(tmp_path, match=True)
    other = tmp_path / "other.yaml"
    other.write_text(CAMPAIGN.read_text().replace("key: q4-ops-intro", "key: other-one"))
    leads = [f"g{i}@goog.example" for i in range(4)]
    import_leads(db_url, other, mailboxes, leads_csv(tmp_path, leads[:2], name="other.csv"))
    campaign.write_text(campaign.read_text() + "overlap: skip\n")
    result = import_leads(db_url, campaign, mailboxes, leads_csv(tmp_path, leads))
    assert (result.enrolled, result.overlap_skipped) == (2, 2)
    started = {r["email"]: r["address"] for r in rows(
        db_url, "SELECT l.email, m.address FROM outreach.enrollments en"
        " JOIN outreach.campaigns c ON c.id = en.campaign_id AND c.key = 'q4-ops-intro'"
        " JOIN outreach.leads l ON l.id = en.lead_id"
        " JOIN outreach.mailboxes m ON m.id = en.mailbox_id WHERE en.status = 'active'")}
    assert sorted(started) == leads[2:]
    # Two leads start, two mailboxes: anna's share is 1, and it is a Google lead's.
    assert sorted(started.values()) == [ANNA, BEN]
