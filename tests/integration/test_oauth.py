"""OAuth 2.0 (XOAUTH2) logins, end to end on loopback: the product sends through an aiosmtpd
server that requires ``AUTH XOAUTH2`` and reads a real Dovecot whose oauth2 passdb introspects
each token, both accepting only tokens of a local identity provider that plays Google's (JWT
bearer grant of a service-account key generated here) and Microsoft's (client credentials through
MSAL) token endpoints (tests/oauthserver.py). No mock: real PostgreSQL, real send and inbox runs."""

from __future__ import annotations

import base64
import logging
import uuid

import psycopg
import pytest

from outreach import oauth
from outreach.dev.devimap import DovecotServer, DovecotUnavailable
from support.flow import leads_csv, one_mailbox, rows, send_all
from support.inboxflow import ANNA, IMAP_CONN_IDS, mail, read_all, sent_campaign
from support.oauthserver import IdentityProvider, XOAuth2Sink
from support.paths import CAMPAIGN, MAILBOXES, SMTP_CONN_IDS

DELEGATION = "domain-wide delegation for scope https://mail.google.com/ not granted"


@pytest.fixture(scope="module")
def idp(tmp_path_factory) -> IdentityProvider:
    server = IdentityProvider(tmp_path_factory.mktemp("idp")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oauth_dovecot(idp) -> DovecotServer:
    """A Dovecot of its own whose XOAUTH2 logins are checked against the IdP's introspection."""
    server = DovecotServer(oauth2_introspection_url=idp.introspection_url)
    try:
        server.start()
    except DovecotUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def env(idp, monkeypatch, caplog):
    """Trust the IdP's certificate (requests: REQUESTS_CA_BUNDLE), an empty token cache, every
    log record captured at DEBUG."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(idp.cert))
    oauth.CACHE.clear()
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="outreach")  # the product's logger has its own level
    yield
    oauth.CACHE.clear()


@pytest.fixture
def xsink(tmp_path, idp):
    server = XOAuth2Sink(tmp_path / "maildir", idp).start()
    yield server
    server.stop()


def smtp_oauth(monkeypatch, xsink, extra: dict) -> None:
    """Every demo mailbox's SMTP connection: the XOAUTH2 sink, logging in as anna."""
    for conn_id in SMTP_CONN_IDS:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", xsink.connection_json(ANNA, extra))


def imap_oauth(monkeypatch, dovecot: DovecotServer, extra_for) -> str:
    """Anna's inbox on the OAuth Dovecot with ``extra_for(login)``; the other inboxes there with
    passwords. Return anna's IMAP login."""
    import json

    login = ""
    for conn_id in IMAP_CONN_IDS:
        user = dovecot.add_user(f"{conn_id}-{uuid.uuid4().hex[:8]}@imap.test")
        conn = json.loads(dovecot.connection_json(user))
        if conn_id == "outreach_imap_anna":
            login = user
            conn.pop("password")
            conn["extra"].update(extra_for(user))
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return login


def google_extra(key: dict) -> dict:
    return {"auth_type": "oauth2", "oauth2_provider": "google", "keyfile_dict": key}


def assert_no_token(db_url: str, idp: IdentityProvider, caplog, capfd, *texts: str) -> None:
    """No token the IdP issued (nor its XOAUTH2 form) is in any outreach table, any log record
    of the product or its libraries (caplog; and the process's stdout/stderr, where Airflow's
    log set-up sends them once it is configured), or ``texts`` (error messages, CLI output)."""
    with psycopg.connect(db_url) as c:
        tables = [r[0] for r in c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'outreach'")]
        dump = "\n".join(str(r[0]) for t in tables
                         for r in c.execute(f'SELECT t::text FROM outreach."{t}" t'))
    # aiosmtpd's own logger (mail.log) is the test server's, not the product's.
    logged = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("mail.log"))
    out, err = capfd.readouterr()
    logged += "\n" + "\n".join(line for line in (out + err).splitlines() if "[mail.log]" not in line)
    assert idp.issued and len(dump) > 100 and logged
    for token in idp.issued:
        forms = [token, base64.b64encode(oauth.xoauth2(ANNA, token).encode()).decode()]
        for where, text in [("database", dump), ("logs", logged)] + [("text", t) for t in texts]:
            assert not any(f in text for f in forms), f"a token is in the {where}"


def test_google_service_account_sends_and_reads(db_url, tmp_path, settings, idp, oauth_dovecot,
                                                xsink, env, monkeypatch, caplog, capfd):
    key = idp.google_key()
    smtp_oauth(monkeypatch, xsink, google_extra(key))
    login = imap_oauth(monkeypatch, oauth_dovecot, lambda _user: google_extra(key))
    grants = len(idp.grants)

    sent = sent_campaign(db_url, tmp_path, settings, ["p1@lead.example", "p2@lead.example",
                                                      "p3@lead.example"])
    assert {m["X-RcptTo"] for m in xsink.messages()} == set(sent)
    assert xsink.handler.accepted == [ANNA] and xsink.handler.refused == []
    assert {r["status"] for r in rows(db_url, "SELECT status::text FROM outreach.emails")} == {"sent"}

    oauth_dovecot.append(login, mail("p1@lead.example", "Re: hello", "Sounds good, call me."))
    anna = {s.conn_id: s for s in read_all(db_url)}["outreach_imap_anna"]
    assert anna.fetched == 1 and not anna.error, anna.line()
    # One token per subject (the SMTP login, the IMAP login), each fetched once: the SMTP
    # sessions of later batches and the IMAP session share the process's cache.
    assert idp.grants[grants:] == [("google", ANNA), ("google", login)]
    assert_no_token(db_url, idp, caplog, capfd)


def test_microsoft_client_credentials_send_and_read(db_url, tmp_path, settings, idp,
                                                    oauth_dovecot, xsink, env, monkeypatch,
                                                    caplog, capfd):
    smtp_oauth(monkeypatch, xsink, idp.microsoft_app(ANNA, client_id="app-smtp"))
    login = imap_oauth(monkeypatch, oauth_dovecot,
                       lambda user: idp.microsoft_app(user, client_id="app-imap"))
    grants = len(idp.grants)

    sent = sent_campaign(db_url, tmp_path, settings, ["m1@lead.example", "m2@lead.example"])
    assert {m["X-RcptTo"] for m in xsink.messages()} == set(sent)
    oauth_dovecot.append(login, mail("m2@lead.example", "Re: hello", "Yes please."))
    anna = {s.conn_id: s for s in read_all(db_url)}["outreach_imap_anna"]
    assert anna.fetched == 1, anna.line()
    assert idp.grants[grants:] == [("microsoft", ANNA), ("microsoft", login)]
    assert_no_token(db_url, idp, caplog, capfd)


def test_microsoft_certificate_credential_sends(db_url, tmp_path, settings, idp, xsink, env,
                                               monkeypatch, caplog, capfd):
    smtp_oauth(monkeypatch, xsink, idp.microsoft_app(ANNA, client_id="app-cert", certificate=True))
    refusals = len(idp.refusals)
    sent = sent_campaign(db_url, tmp_path, settings, ["c1@lead.example"])
    assert {m["X-RcptTo"] for m in xsink.messages()} == set(sent)
    assert idp.grants[-1] == ("microsoft", ANNA) and len(idp.refusals) == refusals
    assert_no_token(db_url, idp, caplog, capfd)


def test_a_token_expired_early_is_refreshed_once(db_url, tmp_path, settings, idp, oauth_dovecot,
                                                 xsink, env, monkeypatch, caplog, capfd):
    from outreach.leads import import_leads
    from outreach.queue import queue_due

    key = idp.google_key("refresh@proj.iam.gserviceaccount.com")
    smtp_oauth(monkeypatch, xsink, google_extra(key))
    login = imap_oauth(monkeypatch, oauth_dovecot, lambda _user: google_extra(key))
    sent_campaign(db_url, tmp_path, settings, ["e1@lead.example"])
    read_all(db_url)
    grants = len(idp.grants)

    idp.expire_all()  # the cache still holds both tokens, the servers no longer accept them
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["e2@lead.example"], "more.csv"))
    queue_due(db_url)
    send_all(db_url, settings)
    oauth_dovecot.append(login, mail("e1@lead.example", "Re: hi", "ok"))
    anna = {s.conn_id: s for s in read_all(db_url)}["outreach_imap_anna"]

    assert len(xsink.messages()) == 2 and anna.fetched == 1
    assert xsink.handler.refused == [ANNA]  # the stale token once, then the fresh one
    assert idp.grants[grants:] == [("google", ANNA), ("google", login)]  # one refresh each
    assert {(r["status"], r["attempts"]) for r in rows(
        db_url, "SELECT status::text, attempts FROM outreach.emails")} == {("sent", 1)}
    assert_no_token(db_url, idp, caplog, capfd)


@pytest.mark.parametrize("break_it, reason, fix", [
    ("delegation", "Google refused the token request (unauthorized_client", DELEGATION),
    ("key", "Google refused the token request (invalid_grant: Invalid JWT Signature.)",
     "the service-account key was deleted, disabled or is not this account's"),
    ("secret", "Microsoft refused the token request (invalid_client: AADSTS7000215",
     "the client secret is wrong"),
])
def test_a_revoked_credential_fails_the_run_red_and_consumes_no_attempt(
        db_url, tmp_path, settings, idp, oauth_dovecot, xsink, env, monkeypatch, caplog, capfd,
        break_it, reason, fix):
    from outreach.leads import import_leads
    from outreach.queue import queue_due

    email = f"{break_it}@proj.iam.gserviceaccount.com"
    if break_it == "secret":
        extra_for = lambda user: idp.microsoft_app(user, client_id=f"app-{user}")  # noqa: E731 - the decoder of the two sets on the next line
        smtp_oauth(monkeypatch, xsink, extra_for(ANNA))
        login = imap_oauth(monkeypatch, oauth_dovecot, extra_for)
    else:
        key = idp.google_key(email)
        smtp_oauth(monkeypatch, xsink, google_extra(key))
        imap_oauth(monkeypatch, oauth_dovecot, lambda _user: google_extra(key))
    # It worked yesterday: a send and a read, tokens issued and cached.
    sent_campaign(db_url, tmp_path, settings, ["r0@lead.example"])
    read_all(db_url)
    if break_it == "secret":
        idp.rotate_secret("contoso-tenant-id", f"app-{ANNA}")
        idp.rotate_secret("contoso-tenant-id", f"app-{login}")
    elif break_it == "delegation":
        idp.revoke_delegation(email)
    else:
        idp.delete_google_key(email)
    idp.expire_all()  # the servers refuse the cached tokens: the refresh meets the revocation
    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, ["r1@lead.example", "r2@lead.example"], "more.csv"))
    one_mailbox(db_url)
    queue_due(db_url)

    # The Airflow send task of the run: it fails red at once (no retry can fix a credential).
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from outreach.airflow import tasks_inbox, tasks_send
    from outreach.queue import plan_batches

    for name, value in {"OUTREACH_DATABASE_URL": db_url, "OUTREACH_SEND_INTERVAL_MINUTES": "0",
                        "OUTREACH_PUBLIC_URL": settings.public_url,
                        "OUTREACH_UNSUBSCRIBE_SECRET": settings.unsubscribe_secret}.items():
        monkeypatch.setenv(name, value)
    [batch] = plan_batches(db_url, 50, parallelism=1, interval=settings.send_interval)
    ti = SimpleNamespace(dag_id="outreach_send", run_id="manual__1", task_id="send_batch",
                         map_index=0, try_number=1)
    with pytest.raises(AirflowFailException) as failed:
        tasks_send.send_task(batch, {"ti": ti})
    line = str(failed.value)
    assert "\n" not in line and "'outreach_smtp_anna'" in line, line
    assert reason in line and fix in line, line
    assert "no attempt counted" in line
    assert len(xsink.messages()) == 1 and xsink.handler.accepted == [ANNA]  # yesterday's only
    assert xsink.handler.refused == [ANNA]  # the stale token; the fresh one was never issued
    state = rows(db_url, "SELECT status::text, attempts, last_error FROM outreach.emails "
                         "WHERE status <> 'sent'")
    assert {(r["status"], r["attempts"]) for r in state} == {("queued", 0)} and len(state) == 2
    assert all(fix in r["last_error"] for r in state)

    from outreach.inbox import plan_targets

    [anna] = [t for t in plan_targets(db_url) if t["conn_id"] == "outreach_imap_anna"]
    with pytest.raises(AirflowFailException) as unread:
        tasks_inbox.inbox_read_task(anna)
    assert "outreach_imap_anna" in str(unread.value) and fix in str(unread.value), unread.value
    # One alert per refused connection and day, naming it and the fix; again the same day: none.
    alerts = rows(db_url, "SELECT kind, event_key, body FROM outreach.alerts ORDER BY id")
    assert [a["event_key"].rsplit(":", 1)[0] for a in alerts] == [
        "login-failed:outreach_smtp_anna", "login-failed:outreach_imap_anna"], alerts
    assert all(a["kind"] == "login_failed" and fix in a["body"] for a in alerts)
    with pytest.raises(AirflowFailException):
        tasks_inbox.inbox_read_task(anna)
    assert len(rows(db_url, "SELECT id FROM outreach.alerts")) == 2
    assert_no_token(db_url, idp, caplog, capfd, line, str(unread.value))


def test_mailbox_check_says_which_logins_work(db_url, tmp_path, settings, idp, oauth_dovecot,
                                              xsink, env, monkeypatch, caplog, capfd):
    from outreach.campaign import sync_mailboxes
    from outreach.cli import main

    sync_mailboxes(db_url, MAILBOXES)
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    key = idp.google_key("check@proj.iam.gserviceaccount.com")
    smtp_oauth(monkeypatch, xsink, google_extra(key))
    imap_oauth(monkeypatch, oauth_dovecot, lambda _user: google_extra(key))
    assert main(["mailbox", "check", ANNA]) == 0
    first = out = capfd.readouterr().out
    assert "SMTP outreach_smtp_anna (oauth2 google): login OK" in out, out
    assert "IMAP outreach_imap_anna (oauth2 google): login OK" in out, out

    # The mailbox file's declaration is checked against what the connections do.
    shipped = MAILBOXES.read_text()
    anna_line = f"  - address: {ANNA}\n"
    for declared, code in (("oauth2", 0), ("basic", 1)):
        declaring = tmp_path / f"mailboxes-{declared}.yaml"
        declaring.write_text(shipped.replace(anna_line, anna_line + f"    auth: {declared}\n"))
        assert main(["mailbox", "check", ANNA, "--file", str(declaring)]) == code
        out = capfd.readouterr().out
        assert (out.count("login OK"), out.count("declares auth basic but the connection logs "
                                                 "in with oauth2 google")) == (
            (2, 0) if code == 0 else (0, 2)), out

    oauth.CACHE.clear()
    idp.revoke_delegation("check@proj.iam.gserviceaccount.com")
    assert main(["mailbox", "check", ANNA]) == 1
    out = capfd.readouterr().out
    assert out.count("FAILED") == 2 and out.count(DELEGATION) == 2, out
    assert_no_token(db_url, idp, caplog, capfd, first, out)


def test_a_static_token_logs_in_and_is_not_refreshed(db_url, tmp_path, settings, idp, xsink, env,
                                                    monkeypatch, caplog, capfd):
    from outreach.cli.logincheck import check_smtp

    token = idp._issue("google", ANNA)["access_token"]  # handed out by someone, for a short job
    smtp_oauth(monkeypatch, xsink, {"auth_type": "oauth2", "oauth2_provider": "token",
                                    "access_token": token})
    sent = sent_campaign(db_url, tmp_path, settings, ["s1@lead.example"])
    assert {m["X-RcptTo"] for m in xsink.messages()} == set(sent)

    idp.expire_all()
    refused = check_smtp("outreach_smtp_anna")
    assert not refused.ok and "the static access_token was refused" in refused.detail, refused
    assert xsink.handler.refused == [ANNA]  # tried once: a static token has no refresh
    assert_no_token(db_url, idp, caplog, capfd, refused.line())


def _task_env(monkeypatch, db_url: str, settings) -> None:
    for name, value in {"OUTREACH_DATABASE_URL": db_url, "OUTREACH_SEND_INTERVAL_MINUTES": "0",
                        "OUTREACH_PUBLIC_URL": settings.public_url,
                        "OUTREACH_UNSUBSCRIBE_SECRET": settings.unsubscribe_secret}.items():
        monkeypatch.setenv(name, value)


def _queued(db_url: str, tmp_path, addresses: list[str]) -> None:
    from outreach.leads import import_leads
    from outreach.queue import queue_due

    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, addresses))
    one_mailbox(db_url)
    queue_due(db_url)


def test_the_airflow_tasks_return_no_token(db_url, tmp_path, settings, idp, oauth_dovecot, xsink,
                                           env, monkeypatch, caplog, capfd):
    """What the send and inbox tasks return is what Airflow stores as their XCom."""
    import json
    from types import SimpleNamespace

    from outreach.airflow import tasks_inbox, tasks_send
    from outreach.inbox import plan_targets
    from outreach.queue import plan_batches

    key = idp.google_key("xcom@proj.iam.gserviceaccount.com")
    smtp_oauth(monkeypatch, xsink, google_extra(key))
    login = imap_oauth(monkeypatch, oauth_dovecot, lambda _user: google_extra(key))
    _task_env(monkeypatch, db_url, settings)
    _queued(db_url, tmp_path, ["x1@lead.example", "x2@lead.example"])
    [batch] = plan_batches(db_url, 50, parallelism=1, interval=settings.send_interval)
    ti = SimpleNamespace(dag_id="outreach_send", run_id="manual__x", task_id="send_batch",
                         map_index=0, try_number=1)
    sent = tasks_send.send_task(batch, {"ti": ti})
    oauth_dovecot.append(login, mail("x1@lead.example", "Re: hi", "thanks"))
    read = [tasks_inbox.inbox_read_task(t) for t in plan_targets(db_url)]
    assert len(xsink.messages()) == 2 and sum(r["fetched"] for r in read) == 1, (sent, read)
    assert_no_token(db_url, idp, caplog, capfd, json.dumps(sent, default=str),
                    json.dumps(read, default=str))


def test_a_refused_password_is_a_login_failure_too(db_url, tmp_path, settings, idp, oauth_dovecot,
                                                   xsink, env, monkeypatch):
    """Basic logins refused (SMTP 535, IMAP AUTHENTICATIONFAILED): the same red, unretried task,
    no attempt counted, one alert per connection."""
    import json
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from outreach.airflow import tasks_inbox, tasks_send
    from outreach.inbox import plan_targets
    from outreach.oauth import BASIC_FIX
    from outreach.queue import plan_batches

    basic = json.loads(xsink.connection_json(ANNA, {}))  # the sink refuses every password
    basic["password"] = "wrong"
    for conn_id in SMTP_CONN_IDS:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(basic))
    imap_oauth(monkeypatch, oauth_dovecot, lambda _user: {})
    imap = json.loads(__import__("os").environ["AIRFLOW_CONN_OUTREACH_IMAP_ANNA"])
    imap["password"] = "not-the-password"
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_IMAP_ANNA", json.dumps(imap))
    _task_env(monkeypatch, db_url, settings)
    _queued(db_url, tmp_path, ["b1@lead.example"])
    [batch] = plan_batches(db_url, 50, parallelism=1, interval=settings.send_interval)
    ti = SimpleNamespace(dag_id="outreach_send", run_id="manual__b", task_id="send_batch",
                         map_index=0, try_number=1)
    with pytest.raises(AirflowFailException) as failed:
        tasks_send.send_task(batch, {"ti": ti})
    assert "SMTP login refused (535" in str(failed.value) and BASIC_FIX in str(failed.value)
    [anna] = [t for t in plan_targets(db_url) if t["conn_id"] == "outreach_imap_anna"]
    with pytest.raises(AirflowFailException) as unread:
        tasks_inbox.inbox_read_task(anna)
    assert "IMAP login refused" in str(unread.value) and BASIC_FIX in str(unread.value)
    assert {(r["status"], r["attempts"]) for r in rows(
        db_url, "SELECT status::text, attempts FROM outreach.emails")} == {("queued", 0)}
    assert sorted(a["event_key"].rsplit(":", 1)[0] for a in rows(
        db_url, "SELECT event_key FROM outreach.alerts")) == [
        "login-failed:outreach_imap_anna", "login-failed:outreach_smtp_anna"]


def test_a_login_refused_on_the_second_session_of_a_batch_releases_the_rest(
        db_url, tmp_path, settings, idp, xsink, env, monkeypatch, caplog, capfd):
    """The batch's first session logs in and sends; the server then hangs up (421 to the second
    RCPT), and while it is down the app's secret is rotated and the tokens expire: the reconnect's
    login is refused. What was sent stays sent, the 421's row is the row's retry (one attempt),
    every later row goes back to the queue with no attempt counted, none is left 'sending', and
    the run fails naming the connection and the fix."""
    from outreach.airflow.connections import smtp_connector
    from outreach.leads import import_leads
    from outreach.queue import queue_due
    from outreach.send import MailboxUnreachable, send_run

    smtp_oauth(monkeypatch, xsink, idp.microsoft_app(ANNA, client_id="app-second"))
    seen: list[str] = []

    async def handle_RCPT(server, session, envelope, address, rcpt_options):
        seen.append(address)
        if len(seen) == 2:
            idp.rotate_secret("contoso-tenant-id", "app-second")
            idp.expire_all()
            return "421 4.3.2 Service shutting down, closing channel"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    xsink.handler.handle_RCPT = handle_RCPT
    leads = [f"s{i}@lead.example" for i in range(5)]
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, leads, "second.csv"))
    one_mailbox(db_url)
    queue_due(db_url)
    with pytest.raises(MailboxUnreachable) as failed:
        send_run(db_url, smtp_connector, settings)

    state = rows(db_url, "SELECT id, status::text, attempts, handed_over_at IS NOT NULL AS stamped "
                         "FROM outreach.emails ORDER BY id")
    assert [(r["status"], r["attempts"]) for r in state] == \
        [("sent", 1), ("queued", 1)] + [("queued", 0)] * 3, state
    assert not any(r["stamped"] for r in state[1:]), state
    assert len(xsink.messages()) == 1
    line = str(failed.value)
    assert "'outreach_smtp_anna'" in line and "the client secret is wrong" in line, line
    assert [r.conn_id for r in oauth.take_refusals(["outreach_smtp_anna"])] == ["outreach_smtp_anna"]
    assert_no_token(db_url, idp, caplog, capfd, line)
