"""The preflight's relay check (outreach.preflight.check_relays) asks each SMTP connection once,
at the same time as the others: a silent relay shared by many mailboxes is asked once, and OAuth
connections fetch their tokens at the same time (outreach.oauth.TokenCache: one fetch at a time
per key, not per process). Found by an attack on the parallel check (h-attack3)."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from outreach import oauth
from outreach.leads import import_leads
from support.flow import leads_csv
from support.paths import CAMPAIGN, MAILBOXES
from support.silent import silent_listener


@pytest.fixture
def silent_relay():
    """A TCP server that accepts and never sends the greeting; yields ``(port, accepted)``."""
    with silent_listener() as relay:
        yield relay


def _more_mailboxes(db_url: str, n: int, conn_id: str) -> None:
    with psycopg.connect(db_url) as c:
        for i in range(n):
            c.execute("""INSERT INTO outreach.mailboxes (address, display_name, smtp_conn_id,
                                                         imap_conn_id, timezone, status)
                         SELECT %s, display_name, %s, imap_conn_id, timezone, 'active'
                         FROM outreach.mailboxes WHERE id = 1""",
                      (f"extra{i}@mail.outreach-demo.example", conn_id))


def test_oauth_relays_fetch_their_tokens_at_the_same_time(db_url, tmp_path, monkeypatch):
    from outreach.airflow.connections import smtp_connector
    from outreach.preflight import check_relays

    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["ann@acme.example"]))
    barrier = threading.Barrier(2)

    def meeting_fetch(cfg):
        try:  # fetches one after the other never meet: the barrier breaks after 10 s
            barrier.wait(10)
        except threading.BrokenBarrierError:
            pass
        raise oauth.TokenUnavailable(cfg.conn_id, "the token endpoint timed out", "retry")

    monkeypatch.setitem(oauth._FETCH, "token", meeting_fetch)
    oauth.CACHE.clear()
    for who in ("anna", "ben"):
        monkeypatch.setenv(f"AIRFLOW_CONN_OUTREACH_SMTP_{who.upper()}", json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": 1, "login": f"{who}@example.com",
            "extra": {"auth_type": "oauth2", "oauth2_provider": "token", "access_token": "x"}}))
    checks = check_relays(db_url, smtp_connector)
    assert not barrier.broken, "the OAuth connections fetched their tokens one after the other"
    assert [c.check.status for c in checks] == ["WARN", "WARN"]


def test_a_silent_relay_shared_by_many_mailboxes_is_asked_once_per_connection(
        db_url, tmp_path, monkeypatch, silent_relay):
    from outreach.airflow.connections import smtp_connector
    from outreach.preflight import check_relays

    port, accepted = silent_relay
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["ann@acme.example"]))
    _more_mailboxes(db_url, 10, "outreach_smtp_anna")
    conn = json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": port,
                       "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 2,
                                 "retry_limit": 0}})
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_ANNA", conn)
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_BEN", conn)
    checks = check_relays(db_url, smtp_connector)
    assert [c.mailbox_id for c in checks] == list(range(1, 13))  # one row per mailbox, in order
    assert all(c.check.status == "WARN" and "could not be asked" in c.check.detail for c in checks)
    assert len(accepted) == 2, f"{len(accepted)} sessions for 2 connections"
