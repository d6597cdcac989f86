"""A mailbox whose SMTP server requires AUTH but whose connection has no login: the server
answers MAIL FROM with "530 5.7.0 Authentication required" (RFC 4954 §6). That is the mailbox's
failure, not every row's: the batch goes back to the queue with no attempt counted, the other
mailbox of the run still sends, and the run fails with one line naming the connection and the
fix (outreach.transport.session_refusal). Real PostgreSQL, real aiosmtpd servers on loopback."""

from __future__ import annotations

import datetime as dt
import json
import mailbox

import pytest
from aiosmtpd.handlers import Mailbox

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.dev.devsmtp import MaildirServer, free_port, read_maildir
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.send import MailboxUnreachable, send_run
from outreach.transactional import enqueue, send_due
from support.flow import leads_csv, rows
from support.oauthserver import _PlainAuthController as PlainAuthController
from support.paths import CAMPAIGN, MAILBOXES

T0 = dt.datetime.now(dt.UTC).replace(microsecond=0)


class AuthRequiredSink:
    """aiosmtpd with ``auth_required=True`` (plain text on loopback: ``auth_require_tls=False``),
    storing whatever it accepts in a Maildir; it accepts nothing from a session that never
    logged in (530 5.7.0 to MAIL)."""

    def __init__(self, maildir) -> None:
        self.maildir = maildir
        mailbox.Maildir(str(maildir), create=True)
        self.port = free_port()
        # The controller that keeps aiosmtpd quiet about AUTH without TLS (loopback, on purpose).
        self._controller = PlainAuthController(Mailbox(maildir), hostname="127.0.0.1",
                                               port=self.port, auth_required=True,
                                               auth_require_tls=False)

    def __enter__(self) -> AuthRequiredSink:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()

    def messages(self) -> list:
        return read_maildir(self.maildir)

    def connection_json(self) -> str:
        """An Airflow SMTP connection to this server with no login (the configuration mistake)."""
        return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": self.port,
                           "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 5,
                                     "retry_limit": 0}})


def emails(url: str) -> list[dict]:
    return rows(url, """SELECT e.id, e.mailbox_id, e.status::text AS status, e.attempts,
                               e.handed_over_at, e.last_error, e.failure_kind
                        FROM outreach.emails e ORDER BY e.id""")


def test_530_at_mail_releases_the_mailboxs_batch_and_the_other_mailbox_still_sends(
        db_url, settings, tmp_path, monkeypatch):
    with AuthRequiredSink(tmp_path / "auth") as locked, MaildirServer(tmp_path / "open") as sink:
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_ANNA", locked.connection_json())
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_BEN", sink.connection_json(timeout=5))
        leads = [f"p{i}@auth.example" for i in range(8)]
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, leads), now=T0)
        assert queue_due(db_url, now=T0)["queued"] == len(leads)
        before = {r["id"]: r["mailbox_id"] for r in emails(db_url)}
        anna = [i for i, mb in before.items() if mb == 1]
        ben = [i for i, mb in before.items() if mb == 2]
        assert anna and ben  # the demo campaign spreads the leads over both mailboxes

        with pytest.raises(MailboxUnreachable) as exc:
            send_run(db_url, smtp_connector, settings, now=T0)

        # Nothing reached the locked server; every row of its mailbox is back in the queue, no
        # attempt counted, no handoff stamp left behind (not 'sending' for the reaper).
        assert locked.messages() == []
        after = {r["id"]: r for r in emails(db_url)}
        for i in anna:
            r = after[i]
            assert (r["status"], r["attempts"], r["failure_kind"], r["handed_over_at"]) == \
                ("queued", 0, None, None), r
            assert r["last_error"].startswith("MAIL 530 5.7.0 Authentication required"), r
        # The other mailbox of the same run sent everything it had.
        assert {after[i]["status"] for i in ben} == {"sent"}
        assert len(sink.messages()) == len(ben)
        # One line, naming the connection and what to fix.
        [failure] = exc.value.failures
        assert (failure["mailbox_id"], failure["conn_id"], failure["stage"]) == \
            (1, "outreach_smtp_anna", "MAIL")
        assert failure["released"] == len(anna)
        text = str(exc.value)
        assert "\n" not in text
        assert ("'outreach_smtp_anna' failed at MAIL: 530 5.7.0 Authentication required; the "
                "server requires authentication: give connection 'outreach_smtp_anna' a login, "
                "or set its extra auth_type") in text, text
        by_mailbox = {b.mailbox_id: b for b in exc.value.summaries}
        assert by_mailbox[1].unreachable and by_mailbox[1].failed == 0 and by_mailbox[1].sent == 0
        assert by_mailbox[2].sent == len(ben) and not by_mailbox[2].unreachable


def test_transactional_mail_to_a_server_requiring_auth_waits_in_the_queue(
        tx_url, settings, tmp_path, monkeypatch):
    """The transactional sender shares send_batch: the same 530 releases its row too."""
    with AuthRequiredSink(tmp_path / "auth") as locked:
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_HELLO", locked.connection_json())
        with db.connect(tx_url) as conn, conn.transaction():
            enqueue(conn, "signup-auth", "jo@example.com", "welcome",
                    {"user": {"name": "Jo"}, "verify_url": "https://app.example/verify?t=1"})
        with pytest.raises(MailboxUnreachable) as exc:
            send_due(tx_url, smtp_connector, settings)
        assert "'outreach_smtp_hello' failed at MAIL: 530" in str(exc.value)
        assert locked.messages() == []
        [r] = emails(tx_url)
        assert (r["status"], r["attempts"], r["handed_over_at"]) == ("queued", 0, None), r
