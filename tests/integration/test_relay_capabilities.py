"""A relay's capabilities decide at once (issue 31, item 5): a relay without SMTPUTF8 cannot carry
``josé@…`` and a message over the relay's SIZE cannot go through it, whatever the attempt, so the
row fails permanently with the reason after 1 attempt instead of three retries 30 minutes apart.
Real aiosmtpd servers (tests/support/faultsmtp.py) that do not offer SMTPUTF8 / advertise a small
SIZE; the preflight names the relay and how many queued rows it cannot carry."""

from __future__ import annotations

import datetime as dt
import shutil
import threading

from outreach.leads import import_leads
from outreach.queue import queue_due
from support import invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import leads_csv, one_mailbox, point_mailboxes_at, rows, send_all
from support.paths import CAMPAIGN, MAILBOXES, ROOT

LATER = dt.timedelta(hours=2)  # past every retry delay: a retried row would be claimed again


def _state(db_url):
    return {r["email"]: r for r in rows(db_url, """
        SELECT l.email, e.status::text AS status, e.failure_kind, e.attempts, e.last_error
        FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id""")}


def test_relay_without_smtputf8_fails_a_non_ascii_address_permanently_in_one_attempt(
        db_url, settings, tmp_path, monkeypatch):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [
        "ann@acme.example", "josé@acme.example", "bob@acme.example"]))
    one_mailbox(db_url)
    assert queue_due(db_url)["queued"] == 3
    with FaultSMTPServer(smtputf8=False) as relay:
        point_mailboxes_at(monkeypatch, relay.connection_json(timeout=5))
        send_all(db_url, settings)
        send_all(db_url, settings, now=dt.datetime.now(dt.UTC) + LATER)  # nothing comes back
        messages = relay.messages()
    assert sorted(m["X-RcptTo"] for m in messages) == ["ann@acme.example", "bob@acme.example"]
    jose = _state(db_url)["josé@acme.example"]
    assert (jose["status"], jose["failure_kind"], jose["attempts"]) == ("failed", "permanent", 1)
    assert "does not offer SMTPUTF8" in jose["last_error"] and "j***@acme.example" in jose["last_error"]
    assert "josé@" not in jose["last_error"]
    invariants.assert_ok(db_url, messages)


def test_a_relay_with_smtputf8_carries_the_same_address(db_url, settings, tmp_path, monkeypatch):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["josé@acme.example"]))
    one_mailbox(db_url)
    queue_due(db_url)
    with FaultSMTPServer() as relay:
        point_mailboxes_at(monkeypatch, relay.connection_json(timeout=5))
        send_all(db_url, settings)
        assert [m["X-RcptTo"] for m in relay.messages()] == ["josé@acme.example"]


def test_a_message_over_the_relays_size_fails_permanently_in_one_attempt(
        db_url, settings, tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(ROOT / "include" / "templates", templates)
    body = templates / "ops_intro.txt.j2"
    body.write_text("{% if lead.company == 'Big' %}{{ 'x' * 40000 }}{% endif %}\n" + body.read_text())
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(templates))
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [
        "ann@acme.example,Ann,Acme", "big@big.example,Bo,Big"]))
    one_mailbox(db_url)
    queue_due(db_url)
    with FaultSMTPServer(size_limit=20_000) as relay:
        point_mailboxes_at(monkeypatch, relay.connection_json(timeout=5))
        send_all(db_url, settings)
        send_all(db_url, settings, now=dt.datetime.now(dt.UTC) + LATER)
        messages = relay.messages()
    assert [m["X-RcptTo"] for m in messages] == ["ann@acme.example"]
    big = _state(db_url)["big@big.example"]
    assert (big["status"], big["failure_kind"], big["attempts"]) == ("failed", "permanent", 1)
    assert "larger than the relay's SIZE limit of 20,000 bytes" in big["last_error"]


def test_preflight_names_the_relay_and_the_queued_rows_it_cannot_carry(db_url, tmp_path,
                                                                       monkeypatch):
    from outreach.airflow.connections import smtp_connector
    from outreach.preflight import check_relays

    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [
        "ann@acme.example", "josé@acme.example", "zoë@acme.example"]))
    one_mailbox(db_url)
    queue_due(db_url)
    with FaultSMTPServer(smtputf8=False, size_limit=20_000) as plain, FaultSMTPServer() as utf8:
        point_mailboxes_at(monkeypatch, plain.connection_json(timeout=5))
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_BEN", utf8.connection_json(timeout=5))
        checks = {c.mailbox_id: c for c in check_relays(db_url, smtp_connector)}
        assert plain.messages() == [] and utf8.messages() == []  # EHLO only, nothing sent
    anna, ben = checks[1], checks[2]
    assert (anna.check.status, anna.cannot_carry, anna.smtputf8, anna.size) == ("WARN", 2, False, 20_000)
    assert ("relay of mailbox 1 (connection 'outreach_smtp_anna') does not offer SMTPUTF8: 2 queued "
            "row(s) with a non-ASCII address cannot go through it") in anna.check.detail
    assert "SIZE 20,000 bytes" in anna.check.detail
    assert (ben.check.status, ben.cannot_carry, ben.smtputf8) == ("PASS", 0, True)


class _MeetAtEhlo:
    """An SMTP handler whose EHLO reply waits until every relay of the test has been greeted
    (a barrier): relays asked one after the other never meet, and the barrier breaks."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        import asyncio

        session.host_name = hostname
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.barrier.wait, 10)
        except threading.BrokenBarrierError:
            pass
        return responses


def test_preflight_asks_the_relays_at_the_same_time(db_url, tmp_path, monkeypatch):
    from outreach.airflow.connections import smtp_connector
    from outreach.dev.devsmtp import LoopbackSMTPServer
    from outreach.preflight import check_relays

    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["ann@acme.example"]))
    barrier = threading.Barrier(2)
    with LoopbackSMTPServer(_MeetAtEhlo(barrier)) as a, LoopbackSMTPServer(_MeetAtEhlo(barrier)) as b:
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_ANNA", a.connection_json(timeout=20))
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_BEN", b.connection_json(timeout=20))
        checks = check_relays(db_url, smtp_connector)
    assert not barrier.broken, "the relays were asked one after the other"
    assert [(c.mailbox_id, c.check.status) for c in checks] == [(1, "PASS"), (2, "PASS")]
