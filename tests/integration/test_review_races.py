"""Adversarial review: an opt-out or a stop that commits after a row's pre-send check but before
its handoff stamp (while the SMTP session is being opened) must still keep the message from going
out. Real PostgreSQL, the real CLI for the operator's action, messages counted at a real aiosmtpd
server."""

from __future__ import annotations

import subprocess
import uuid

from outreach.airflow.connections import smtp_connector
from outreach.queue import queue_due
from outreach.send import send_batch
from support import invariants
from support.flow import cli_env, import_demo, outreach_cmd, rows
from support.imapserver import dovecot, imap_accounts  # noqa: F401 - fixtures

CAMPAIGN_KEY = "q4-ops-intro"


def _first_claimed(db_url: str) -> str:
    # The batch's first row: its pre-send check ran right before the session was opened.
    return rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE e.status = 'sending'"
                        " ORDER BY e.scheduled_for, e.id LIMIT 1")[0]["email"]


def _cli(env: dict[str, str], *args: str) -> None:
    p = subprocess.run(outreach_cmd(*args), env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_unsubscribe_while_the_first_row_connects_is_not_sent(db_url, sink, settings, tmp_path):
    env = cli_env(db_url, sink, tmp_path)
    import_demo(db_url)
    queue_due(db_url)
    victims: list[str] = []

    def connector(conn_id: str):
        # session.open(): after the first row's pre-send check, before its handoff stamp.
        victims.append(_first_claimed(db_url))
        _cli(env, "suppress", victims[0], "--reason", "unsubscribed", "--source", "test")
        return smtp_connector(conn_id)

    summary = send_batch(db_url, 1, 20, connector, settings)
    assert victims and victims[0] not in {m["X-RcptTo"] for m in sink.messages()}
    assert (summary.claimed, summary.sent, summary.suppressed) == (20, 19, 1)
    assert rows(db_url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE l.email = %s", (victims[0],)) == [{"s": "suppressed"}]
    invariants.assert_ok(db_url, sink.messages())


def test_lead_stop_while_the_first_row_connects_is_not_sent(db_url, sink, settings, tmp_path):
    env = cli_env(db_url, sink, tmp_path)
    import_demo(db_url)
    queue_due(db_url)
    victims: list[str] = []

    def connector(conn_id: str):
        victims.append(_first_claimed(db_url))
        _cli(env, "lead", "stop", victims[0], "--campaign", CAMPAIGN_KEY, "--by", "Dana",
             "--reason", "replied by phone")
        return smtp_connector(conn_id)

    summary = send_batch(db_url, 1, 20, connector, settings)
    assert victims and victims[0] not in {m["X-RcptTo"] for m in sink.messages()}
    assert (summary.claimed, summary.sent, summary.cancelled) == (20, 19, 1)
    assert rows(db_url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                        " ON l.id = e.lead_id WHERE l.email = %s", (victims[0],)) == [{"s": "cancelled"}]
    invariants.assert_ok(db_url, sink.messages())


def test_sql_enqueue_of_a_spelling_the_sql_normaliser_misses_is_not_sent(db_url, sink, settings):
    """The SQL normaliser (trim, NFC, lower) cannot apply IDNA UTS #46 mapping; the transport
    does (ascii_domain). A hard-bounced address written with a full-width domain or a soft hyphen
    through the documented SQL function must still be found suppressed before the handoff."""
    from outreach import db
    from outreach.campaign import sync_mailboxes
    from outreach.suppression import suppress
    from outreach.transactional import send_due
    from support.paths import MAILBOXES

    sync_mailboxes(db_url, MAILBOXES)
    with db.connect(db_url) as conn, conn.transaction():
        suppress(conn, "bounced@example.com", "bounced", "test")
    spellings = ["bounced@\uff45xample.com", "bounced@exam\u00adple.com"]
    with db.connect(db_url) as conn, conn.transaction():
        for n, to in enumerate(spellings):
            conn.execute("SELECT * FROM outreach.enqueue_transactional(%s, %s, 'welcome', %s::jsonb)",
                         (f"k{n}", to, '{"user": {"name": "Jo"}, "verify_url": "https://a.example/v"}'))
    send_due(db_url, smtp_connector, settings)
    assert [m["X-RcptTo"] for m in sink.messages()] == []
    # The full-width spelling is the suppressed address; the soft hyphen, which email-validator
    # refuses (and the transport would silently drop), is no address outreach sends to.
    assert [(r["s"], r["k"]) for r in rows(db_url, "SELECT status::text AS s, failure_kind AS k"
                                                   " FROM outreach.emails ORDER BY id")] == [
        ("suppressed", None), ("failed", "render")]


def test_a_bounce_naming_the_ace_form_of_an_idn_lead_suppresses_it(db_url, tmp_path, sink, settings,
                                                                    imap_accounts):
    """A DSN names the recipient as RCPT TO had it: the domain IDNA-encoded (ascii_domain). The
    lead is stored with its domain in Unicode; a bounce without our Message-ID enclosed is
    matched by address, so the reader must compare normal forms, or the hard-bounced lead keeps
    getting the next steps."""
    from support.inboxflow import IMAP_CONN_IDS, bounce_sample, next_step_recipients, read_all, sent_campaign

    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    lead, ace = "jo@bücher.example", "jo@xn--bcher-kva.example"
    sent_campaign(db_url, tmp_path, settings, [lead, "keep@quiet.example"])
    assert ace in {m["X-RcptTo"] for m in sink.messages()}
    imap_accounts.append("outreach_imap_anna", bounce_sample("postfix_01.txt", "xxxxx@local.ie", ace))
    (anna,) = [s for s in read_all(db_url, settings.unsubscribe_secret) if s.fetched]
    assert anna.hard_bounce == 1, anna.line()
    assert rows(db_url, "SELECT value, reason FROM outreach.suppressions") == [
        {"value": lead, "reason": "bounced"}]
    assert next_step_recipients(db_url, settings, sink) == {"keep@quiet.example"}


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
