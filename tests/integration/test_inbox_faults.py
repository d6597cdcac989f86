"""The inbox reader's never-twice rules against a real Dovecot and PostgreSQL: a reader SIGKILLed
mid-mailbox (failpoints, in a real ``outreach inbox`` process), two readers at once, and a
UIDVALIDITY change — every effect applied exactly once, checked in SQL."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from support import clifork
from support.flow import cli_env, rows, scalar
from support.inboxflow import IMAP_CONN_IDS, bounce_sample, mail, read_all, sent_campaign
from support.scenario import concurrently


@pytest.fixture
def accounts(imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    return imap_accounts


def deliver(accounts, leads: list[str], sent: dict[str, dict]) -> None:
    """For each lead, alternately a real Postfix bounce (enclosing our Message-ID) and an
    "unsubscribe" reply."""
    for i, lead in enumerate(leads):
        accounts.append("outreach_imap_anna",
                        bounce_sample("postfix_01.txt", "xxxxx@local.ie", lead,
                                      sent[lead]["message_id"]) if i % 2 == 0
                        else mail(lead, "Re: hello", "unsubscribe\n\n> earlier text\n"))


def assert_each_effect_once(db_url: str, leads: list[str]) -> None:
    """The invariant, in SQL: one inbound row per delivered message, one suppression (and one
    'suppress' event) per lead, and no lead's row recorded without its effect."""
    assert scalar(db_url, "SELECT count(*) FROM outreach.inbound_messages") == len(leads)
    assert scalar(db_url, "SELECT count(DISTINCT message_id) FROM outreach.inbound_messages") == len(leads)
    per_lead = rows(db_url, """
        SELECT v.a AS address,
               (SELECT count(*) FROM outreach.suppressions s WHERE s.value = v.a) AS suppressions,
               (SELECT count(*) FROM outreach.suppression_events ev
                WHERE ev.value = v.a AND ev.action = 'suppress') AS events,
               (SELECT count(*) FROM outreach.inbound_messages im
                WHERE coalesce(im.address, im.from_address) = v.a AND im.effect LIKE 'suppressed %%')
                   AS applied
        FROM unnest(%s::text[]) AS v(a) ORDER BY 1""", (leads,))
    assert all((r["suppressions"], r["events"], r["applied"]) == (1, 1, 1) for r in per_lead), per_lead


def test_reader_sigkilled_mid_mailbox_applies_every_effect_once(db_url, tmp_path, sink, settings,
                                                                 accounts):
    leads = [f"k{i}@kill{i}.example" for i in range(6)]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    deliver(accounts, leads, sent)

    def inbox(**failpoint: str) -> subprocess.CompletedProcess:
        env = cli_env(db_url, sink, **accounts.env(), **failpoint)
        return clifork.run(("inbox",), env=env, timeout=120)

    # Killed with the 3rd message recorded and its effect applied, before the commit.
    p = inbox(OUTREACH_FAILPOINTS="inbox_before_commit:3")
    assert p.returncode == -9, p.stdout + p.stderr
    assert scalar(db_url, "SELECT count(*) FROM outreach.inbound_messages") == 2
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == 2
    # Killed right after a commit: that message stays done, the next is not started.
    p = inbox(OUTREACH_FAILPOINTS="inbox_after_commit:2")
    assert p.returncode == -9, p.stdout + p.stderr
    assert scalar(db_url, "SELECT count(*) FROM outreach.inbound_messages") == 4
    p = inbox()
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fetched=2 " in p.stdout and "hard_bounces=1" in p.stdout and "unsubscribes=1" in p.stdout
    assert_each_effect_once(db_url, leads)
    p = inbox()  # and once more: nothing new
    assert p.returncode == 0 and "fetched=0 " in p.stdout, p.stdout
    assert_each_effect_once(db_url, leads)


def test_two_readers_at_once_apply_every_effect_once(db_url, tmp_path, sink, settings, accounts,
                                                     monkeypatch):
    import outreach.inbox as inbox_mod

    leads = [f"t{i}@twice{i}.example" for i in range(8)]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    deliver(accounts, leads, sent)
    # Both readers start from the same cursor and fetch the same messages.
    results: list = []
    concurrently(lambda: results.append(read_all(db_url)), [(), ()])
    assert_each_effect_once(db_url, leads)
    anna = [s for run in results for s in run if s.label.startswith("a***")]
    assert sum(s.fetched for s in anna) >= len(leads)
    assert sum(s.fetched - s.already_seen for s in anna) == len(leads), [s.line() for s in anna]
    assert inbox_mod.COUNTED  # the summary fields the DAG adds up


def test_uidvalidity_change_rereads_by_message_id_without_double_effects(db_url, tmp_path, sink,
                                                                         settings, accounts, dovecot):
    leads = [f"v{i}@valid{i}.example" for i in range(4)]
    sent = sent_campaign(db_url, tmp_path, settings, leads)
    deliver(accounts, leads[:3], sent)
    first = {s.label: s for s in read_all(db_url)}["a***@mail.outreach-demo.example"]
    assert first.fetched == 3
    # The server's UIDVALIDITY changes (a rebuilt index, a restored backup): every UID is void.
    dovecot.set_uidvalidity(accounts.logins["outreach_imap_anna"], first.uidvalidity + 1000)
    deliver(accounts, leads[3:], sent)
    again = {s.label: s for s in read_all(db_url)}["a***@mail.outreach-demo.example"]
    assert again.uidvalidity == first.uidvalidity + 1000
    assert (again.fetched, again.already_seen, again.hard_bounce) == (4, 3, 1), again.line()
    assert_each_effect_once(db_url, leads)
    assert scalar(db_url, "SELECT count(DISTINCT uidvalidity) FROM outreach.inbound_messages") == 2


def test_a_nul_in_an_inbound_header_does_not_block_the_inbox(db_url, tmp_path, sink, settings,
                                                             imap_accounts):
    """PostgreSQL text cannot hold NUL. A stranger's mail whose Subject is an encoded word
    decoding to NUL failed the whole read at the same UID on every run (nothing after it —
    unsubscribes, replies, bounces — was ever processed): a poison message anyone can send."""
    from support.inboxflow import ANNA, IMAP_CONN_IDS, mail, next_step_recipients, read_all, sent_campaign

    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    sent_campaign(db_url, tmp_path, settings, ["u@firstline.example", "keep@quiet.example"])
    imap_accounts.append("outreach_imap_anna", mail("x@stranger.example", "=?utf-8?q?hi=00there?=",
                                                    "hello", to=ANNA))
    # A Message-ID beyond what a btree index entry can hold (random: no compression helps).
    long_id = "<" + "".join(uuid.uuid4().hex for _ in range(200)) + "@stranger.example>"
    imap_accounts.append("outreach_imap_anna", mail("y@stranger.example", "hello", "hello",
                                                    to=ANNA, message_id=long_id))
    imap_accounts.append("outreach_imap_anna", mail("u@firstline.example", "Re: hi",
                                                    "Unsubscribe\n", to=ANNA))
    (anna,) = [s for s in read_all(db_url, settings.unsubscribe_secret) if s.fetched]
    assert (anna.fetched, anna.unmatched, anna.unsubscribe) == (3, 2, 1), anna.line()
    assert rows(db_url, "SELECT value, reason FROM outreach.suppressions") == [
        {"value": "u@firstline.example", "reason": "unsubscribed"}]
    assert next_step_recipients(db_url, settings, sink) == {"keep@quiet.example"}
