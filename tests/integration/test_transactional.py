"""Transactional mail with a durable delivery key: one welcome email at the SMTP server, whatever
retries, timeouts, kills or failed inserts happen (issue 7). Real PostgreSQL, real aiosmtpd, the
example FastAPI application run by uvicorn in its own process, a client that retries."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import threading
import time
import uuid

import httpx
import psycopg
import pytest

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.queue import reap
from outreach.suppression import is_suppressed, suppress
from outreach.transactional import DeliveryKeyConflict, TransactionalError, enqueue, send_due, watch
from support import clifork, invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import cli_env, rows, scalar
from support.signupapp import welcome_messages

HELLO = "hello@mail.outreach-demo.example"
WELCOME_CONTEXT = {"user": {"name": "Jo"}, "verify_url": "https://app.example/verify?token=t0k3n"}


def enqueue_one(url: str, key: str, to: str = "jo@example.com", **kw):
    with db.connect(url) as conn, conn.transaction():
        return enqueue(conn, key, to, "welcome", kw.pop("context", WELCOME_CONTEXT), **kw)


def plain_text(msg) -> str:
    part = next(p for p in msg.walk() if p.get_content_type() == "text/plain")
    return part.get_payload(decode=True).decode(part.get_content_charset() or "utf-8")


def expected_message_id(key: str) -> str:
    return f"{uuid.UUID(hashlib.md5(f'outreach-transactional:{key}'.encode()).hexdigest())}@mail.outreach-demo.example"


# --- the library: enqueue, send, replays ---------------------------------------------------------

def test_same_key_twice_is_one_row_and_one_message(tx_url, sink, settings):
    first = enqueue_one(tx_url, "signup-1")
    again = enqueue_one(tx_url, "signup-1")
    assert first.created and not again.created and again.email_id == first.email_id
    assert send_due(tx_url, smtp_connector, settings).sent == 1
    assert enqueue_one(tx_url, "signup-1").status == "sent"  # a late replay: still the one row
    assert send_due(tx_url, smtp_connector, settings).claimed == 0
    [msg] = sink.messages()
    # The Message-ID comes from the key; no List-Unsubscribe headers on transactional mail
    # (Gmail exempts it), the Feedback-ID names the transactional stream.
    assert msg["Message-ID"].strip("<>") == expected_message_id("signup-1")
    assert msg["List-Unsubscribe"] is None and msg["List-Unsubscribe-Post"] is None
    assert ":transactional:" in msg["Feedback-ID"] and msg["From"].endswith(f"<{HELLO}>")
    assert msg["Subject"].startswith("Welcome to Outreach Demo, Jo")
    body = plain_text(msg)
    assert "https://app.example/verify?token=t0k3n" in body
    assert scalar(tx_url, "SELECT count(*) FROM outreach.emails") == 1
    [log] = rows(tx_url, "SELECT message_id FROM outreach.send_log")
    assert log["message_id"] == expected_message_id("signup-1")
    invariants.assert_ok(tx_url, sink.messages())
    # The report shows transactional mail per template.
    from outreach.report import collect, render_text

    report = collect(tx_url)
    [row] = report["rows"]
    assert (row["campaign"], row["step"], row["template"], row["sent"]) == ("transactional", None, "welcome", 1)
    assert "transactional  welcome" in render_text(report)


def test_a_key_names_one_message(tx_url):
    enqueue_one(tx_url, "k-1", "jo@example.com")
    assert not enqueue_one(tx_url, "k-1", "Jo@Example.COM").created  # the same address
    with pytest.raises(DeliveryKeyConflict, match="already used for another message"):
        enqueue_one(tx_url, "k-1", "someone.else@example.com")
    with pytest.raises(TransactionalError, match="^to: "):
        enqueue_one(tx_url, "k-2", "not an address")
    with pytest.raises(TransactionalError, match="^template: .*nosuch.subject.j2"):
        with db.connect(tx_url) as conn, conn.transaction():
            enqueue(conn, "k-3", "jo@example.com", "nosuch", {})
    with pytest.raises(TransactionalError, match="unknown mailbox"):
        enqueue_one(tx_url, "k-4", mailbox="nobody@mail.outreach-demo.example")
    assert scalar(tx_url, "SELECT count(*) FROM outreach.emails") == 1


def test_concurrent_enqueues_of_one_key_make_one_row(tx_url):
    """The second transaction waits on the first one's key and then returns its row."""
    a = psycopg.connect(tx_url)
    try:
        first = enqueue(a, "race", "jo@example.com", "welcome", WELCOME_CONTEXT)  # not committed
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("b", enqueue_one(tx_url, "race")))
        t.start()
        time.sleep(0.5)
        assert t.is_alive()  # blocked on the uncommitted key
        a.commit()
        t.join(10)
    finally:
        a.close()
    assert out["b"].email_id == first.email_id and not out["b"].created
    assert scalar(tx_url, "SELECT count(*) FROM outreach.emails") == 1


def test_suppression_by_message_class(tx_url, sink, settings):
    """Marketing opt-outs do not stop a welcome email; hard bounces and manual blocks do, at
    enqueue and when added after it."""
    with db.connect(tx_url) as conn, conn.transaction():
        suppress(conn, "unsub@example.com", "unsubscribed", "test")
        suppress(conn, "bounced@example.com", "bounced", "test")
        assert is_suppressed(conn, "unsub@example.com")  # marketing
        assert not is_suppressed(conn, "unsub@example.com", "transactional")
    assert enqueue_one(tx_url, "u", "unsub@example.com").status == "queued"
    assert enqueue_one(tx_url, "b", "bounced@example.com").status == "suppressed"
    later = enqueue_one(tx_url, "m", "blocked@example.com")
    with db.connect(tx_url) as conn, conn.transaction():
        suppress(conn, "blocked@example.com", "manual", "test")  # cancels the queued row
    assert send_due(tx_url, smtp_connector, settings).sent == 1
    assert [m["To"] for m in sink.messages()] == ["unsub@example.com"]
    assert scalar(tx_url, "SELECT status::text FROM outreach.emails WHERE id = %s",
                  (later.email_id,)) == "suppressed"


def test_not_accepted_is_retried_later_and_sent_once(tx_url, monkeypatch, settings):
    """The fault classes are the campaigns': a 4xx goes back to the queue for 30 minutes, a 5.1.1
    fails the row and suppresses the address (a hard bounce stops transactional mail too)."""
    with FaultSMTPServer(rules={"jo@example.com": ["rcpt_451", "accept"],
                                "gone@example.com": ["rcpt_550"]}) as smtp:
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_HELLO", smtp.connection_json())
        enqueue_one(tx_url, "retry-me", "jo@example.com")
        enqueue_one(tx_url, "bounce-me", "gone@example.com")
        s = send_due(tx_url, smtp_connector, settings)
        assert (s.retried, s.failed, s.sent) == (1, 1, 0)
        assert send_due(tx_url, smtp_connector, settings).claimed == 0  # not before 30 minutes
        later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31)
        assert send_due(tx_url, smtp_connector, settings, now=later).sent == 1
        assert send_due(tx_url, smtp_connector, settings, now=later).claimed == 0
        assert [a.recipient for a in smtp.accepted] == ["jo@example.com"]
        with db.connect(tx_url, autocommit=True) as conn:
            assert is_suppressed(conn, "gone@example.com", "transactional")
        invariants.assert_ok(tx_url, smtp.messages())


def test_worker_sends_as_soon_as_a_row_is_committed(tx_url, sink, settings):
    """``outreach transactional worker``: LISTEN/NOTIFY wakes it at the commit, long before its
    poll interval (60 s here)."""
    stop = threading.Event()
    t = threading.Thread(target=watch, args=(tx_url, smtp_connector, settings),
                         kwargs={"poll_seconds": 60, "stop": stop}, daemon=True)
    t.start()
    try:
        time.sleep(1)
        enqueue_one(tx_url, "fast")
        deadline = time.monotonic() + 20
        while not sink.messages() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(sink.messages()) == 1
    finally:
        stop.set()
        enqueue_one(tx_url, "wake-up-to-stop", "stop@example.com")
        t.join(30)
    assert not t.is_alive()


# --- the example application, in its own process, with a client that retries ------------------

def post_with_retries(base: str, key: str, body: dict, *, timeout: float, tries: int = 5) -> tuple[httpx.Response, int]:
    """A client as people write it: the same Idempotency-Key on every retry, retry on a timeout
    or a lost connection. Returns the final response and how many attempts it took."""
    for attempt in range(1, tries + 1):
        try:
            return httpx.post(base + "/signup", json=body, headers={"Idempotency-Key": key},
                              timeout=timeout), attempt
        except (httpx.TimeoutException, httpx.TransportError):
            time.sleep(0.2)
    raise AssertionError(f"no answer after {tries} tries")


def signup_rows(url: str) -> tuple[int, int]:
    return (scalar(url, "SELECT count(*) FROM signup_example.users"),
            scalar(url, "SELECT count(*) FROM outreach.emails"))


def test_client_retries_after_a_timeout_that_came_after_the_commit(tx_url, sink, settings, app_factory):
    """1. The app commits, then takes longer than the client waits; the client retries with the
    same key and gets the first signup back. One user, one email row, one message."""
    app = app_factory(SIGNUP_EXAMPLE_AFTER_COMMIT="sleep:3")
    key = str(uuid.uuid4())
    resp, attempts = post_with_retries(app.base, key, {"email": "jo@example.com", "name": "Jo"}, timeout=1)
    assert (attempts, resp.status_code) == (2, 200), app.output()
    assert resp.json()["replayed"] is True
    assert signup_rows(tx_url) == (1, 1)
    assert send_due(tx_url, smtp_connector, settings).sent == 1
    assert send_due(tx_url, smtp_connector, settings).claimed == 0
    assert len(welcome_messages(sink)) == 1
    invariants.assert_ok(tx_url, sink.messages())


def test_token_exists_but_the_email_was_never_sent(tx_url, sink, settings, app_factory):
    """2. The signup committed its user and verification token; no sender ran (a deploy, an
    outage) and the first attempt later got a 421: the email is still sent, once."""
    app = app_factory()
    resp, _ = post_with_retries(app.base, "k-token", {"email": "jo@example.com", "name": "Jo"}, timeout=10)
    assert resp.status_code == 201
    token = scalar(tx_url, "SELECT verification_token FROM signup_example.users")
    assert token and scalar(tx_url, "SELECT status::text FROM outreach.emails") == "queued"
    with FaultSMTPServer(rules={"jo@example.com": ["rcpt_421", "accept"]}) as smtp:
        os.environ["AIRFLOW_CONN_OUTREACH_SMTP_HELLO"] = smtp.connection_json()
        try:
            assert send_due(tx_url, smtp_connector, settings).retried == 1
            later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31)
            assert send_due(tx_url, smtp_connector, settings, now=later).sent == 1
            assert send_due(tx_url, smtp_connector, settings, now=later).claimed == 0
        finally:
            os.environ["AIRFLOW_CONN_OUTREACH_SMTP_HELLO"] = sink.connection_json()
        [msg] = smtp.messages()
    assert f"token={token}" in plain_text(msg)
    invariants.assert_ok(tx_url, smtp.messages())


def test_a_421_delays_a_welcome_email_by_seconds_not_half_an_hour(tx_url, settings, monkeypatch):
    """Issue 12.9: a transactional email that was not accepted waited 30 minutes like campaign
    mail, so a one-second blip delayed a welcome email by half an hour. The fault server answers
    421 once; with the transactional schedule (10 s, then 60 s) the next cycle after 10 seconds
    sends it, on an injected clock (no sleeping); campaign mail keeps its 30 minutes."""
    t0 = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)  # after the enqueue's clock
    enqueue_one(tx_url, "blip")
    with FaultSMTPServer(rules={"jo@example.com": ["rcpt_421", "accept"]}) as smtp:
        monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_HELLO", smtp.connection_json())
        assert send_due(tx_url, smtp_connector, settings, now=t0).retried == 1
        [row] = rows(tx_url, "SELECT status::text AS s, attempts, scheduled_for FROM outreach.emails")
        assert (row["s"], row["attempts"], row["scheduled_for"]) == ("queued", 1, t0 + dt.timedelta(seconds=10))
        assert send_due(tx_url, smtp_connector, settings, now=t0 + dt.timedelta(seconds=9)).claimed == 0
        assert send_due(tx_url, smtp_connector, settings, now=t0 + dt.timedelta(seconds=11)).sent == 1
        messages = smtp.messages()
    assert [m["X-RcptTo"] for m in messages] == ["jo@example.com"]
    invariants.assert_ok(tx_url, messages)
    # The schedule is a setting (seconds; the n-th wait after the n-th attempt not accepted).
    assert settings.replace(transactional_retry_seconds="5,30").retry_delay("transactional", 2) \
        == dt.timedelta(seconds=30)
    assert settings.retry_delay("marketing", 1) == dt.timedelta(minutes=30)


def test_process_dies_between_the_commit_and_the_pick_up(tx_url, sink, settings, app_factory):
    """3a. The app process is SIGKILLed right after its commit; the client's retry reaches a
    restarted app and gets the committed signup back. The sender picks the row up once."""
    dying = app_factory(SIGNUP_EXAMPLE_AFTER_COMMIT="kill")
    key = str(uuid.uuid4())
    with pytest.raises(httpx.TransportError):
        httpx.post(dying.base + "/signup", json={"email": "jo@example.com", "name": "Jo"},
                   headers={"Idempotency-Key": key}, timeout=10)
    assert dying.proc.wait(10) == -9
    assert signup_rows(tx_url) == (1, 1)
    restarted = app_factory()
    resp, _ = post_with_retries(restarted.base, key, {"email": "jo@example.com", "name": "Jo"}, timeout=10)
    assert resp.status_code == 200 and resp.json()["replayed"] is True
    assert send_due(tx_url, smtp_connector, settings).sent == 1
    assert send_due(tx_url, smtp_connector, settings).claimed == 0
    assert len(welcome_messages(sink)) == 1
    invariants.assert_ok(tx_url, sink.messages())


def test_sender_dies_during_the_handoff_ends_unconfirmed_never_resent(tx_url, sink, tmp_path):
    """3b. The sender process is SIGKILLed after the server accepted the message and before the
    send log was written. The row stays 'sending'; later cycles never resend it; the reaper makes
    it unconfirmed for a person to decide. One message at the server."""
    enqueue_one(tx_url, "handoff")
    env = cli_env(tx_url, sink)
    cmd = ("transactional", "send")
    killed = clifork.run(cmd, env={**env, "OUTREACH_FAILPOINTS": "after_accept:1"}, timeout=120)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert len(welcome_messages(sink)) == 1
    assert scalar(tx_url, "SELECT status::text FROM outreach.emails") == "sending"
    again = clifork.run(cmd, env=env, timeout=120)
    assert again.returncode == 0 and "claimed=0" in again.stdout, again.stdout + again.stderr
    reap(tx_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31))
    [row] = rows(tx_url, "SELECT status::text AS status, failure_kind, last_error FROM outreach.emails")
    assert (row["status"], row["failure_kind"]) == ("failed", "unconfirmed")
    assert "check Sent Items" in row["last_error"]
    assert clifork.run(cmd, env=env, timeout=120).returncode == 0
    assert len(welcome_messages(sink)) == 1
    invariants.assert_ok(tx_url, sink.messages())


BREAK = {
    "user insert": "CREATE TRIGGER t_break BEFORE INSERT ON signup_example.users "
                   "FOR EACH ROW EXECUTE FUNCTION signup_example.t_break()",
    # The user row's last write comes after the email row was inserted in the same transaction.
    "user update after the email insert": "CREATE TRIGGER t_break BEFORE UPDATE ON signup_example.users "
                                          "FOR EACH ROW EXECUTE FUNCTION signup_example.t_break()",
    "email insert": "CREATE TRIGGER t_break BEFORE INSERT ON outreach.emails "
                    "FOR EACH ROW EXECUTE FUNCTION signup_example.t_break()",
}


@pytest.mark.parametrize("broken", list(BREAK))
def test_a_failed_insert_leaves_neither_row(tx_url, sink, settings, app_factory, broken):
    """4. When the user write fails no email row is left behind; when the email insert fails no
    user row is left behind. After the fault is mended, the client's retry signs up once."""
    app = app_factory()  # creates the example's schema
    with psycopg.connect(tx_url, autocommit=True) as c:
        c.execute("CREATE FUNCTION signup_example.t_break() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$")
        c.execute(BREAK[broken])
    key = str(uuid.uuid4())
    resp = httpx.post(app.base + "/signup", json={"email": "jo@example.com", "name": "Jo"},
                      headers={"Idempotency-Key": key}, timeout=10)
    assert resp.status_code == 500
    assert signup_rows(tx_url) == (0, 0)
    with psycopg.connect(tx_url, autocommit=True) as c:
        c.execute("DROP FUNCTION signup_example.t_break() CASCADE")
    resp, _ = post_with_retries(app.base, key, {"email": "jo@example.com", "name": "Jo"}, timeout=10)
    assert resp.status_code == 201 and signup_rows(tx_url) == (1, 1)
    assert send_due(tx_url, smtp_connector, settings).sent == 1
    assert len(welcome_messages(sink)) == 1


# --- found by the adversarial review -------------------------------------------------------------

def test_simultaneous_enqueues_of_a_new_key_never_fail(tx_url):
    """Two transactions enqueue the same new key at the same moment and both commit: one row,
    and neither caller gets an error (the insert has no conflict target: the delivery key and the
    idempotency key made from it are both UNIQUE, and either index may report the race)."""
    errors: list[BaseException] = []
    for i in range(200):  # the race showed in about 1 pair in 60 with a conflict target
        barrier = threading.Barrier(2)

        def one(key=f"pair-{i}", barrier=barrier):
            try:
                with db.connect(tx_url) as conn, conn.transaction():
                    barrier.wait(5)
                    enqueue(conn, key, "jo@example.com", "welcome", WELCOME_CONTEXT)
            except BaseException as exc:  # noqa: BLE001 - collected: the test asserts there were none
                errors.append(exc)

        threads = [threading.Thread(target=one) for _ in range(2)]
        [t.start() for t in threads]
        [t.join(20) for t in threads]
    assert errors == []
    assert scalar(tx_url, "SELECT count(*) FROM outreach.emails") == 200


def test_bad_requests_are_refused_naming_the_field(tx_url):
    for context, match in (([1], "^context: must be a JSON object"),
                           ({"user": {"name": float("nan")}, "verify_url": "x"}, "^context: not JSON"),
                           ({"user": {"name": "a\x00b"}, "verify_url": "x"}, "^context: NUL"),
                           ({}, "^context: .*'user' is undefined")):
        with pytest.raises(TransactionalError, match=match):
            enqueue_one(tx_url, "bad", context=context)
    with pytest.raises(TransactionalError, match="^delivery_key"):
        enqueue_one(tx_url, "a\x00b")
    # The SQL function refuses an ACE domain: suppressions keep IDN domains in Unicode.
    with db.connect(tx_url) as conn, conn.transaction():
        suppress(conn, "@bücher.example", "do-not-contact", "test")
    with psycopg.connect(tx_url) as conn, pytest.raises(psycopg.errors.InvalidParameterValue, match="Unicode"):
        conn.execute("SELECT * FROM outreach.enqueue_transactional('ace', 'anna@xn--bcher-kva.example', "
                      "'welcome', '{}'::jsonb)")
    # The Python function takes either form and stores the Unicode one, which is suppressed.
    assert enqueue_one(tx_url, "idn", "anna@xn--bcher-kva.example").status == "suppressed"
    assert scalar(tx_url, "SELECT recipient FROM outreach.emails") == "anna@bücher.example"


def test_dag_conf_is_checked_before_anything_is_enqueued(tx_url, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.airflow.tasks_transactional import transactional_enqueue_task

    monkeypatch.setenv("OUTREACH_DATABASE_URL", tx_url)
    base = {"delivery_key": None, "to": None, "template": "welcome", "context": {}, "mailbox": None}
    assert transactional_enqueue_task(base, {}) is None  # a send cycle only
    for conf, match in (({"deliveryKey": "k", "to": "jo@example.com"}, "unknown conf key"),
                        ({"to": "jo@example.com"}, "delivery_key: required"),
                        ({"delivery_key": "   ", "to": "jo@example.com"}, "blank")):
        with pytest.raises(AirflowFailException, match=match):
            transactional_enqueue_task({**base, **conf}, conf)
    # The key is used exactly as given (never stripped), like the application's own enqueue.
    conf = {"delivery_key": "welcome:k1 ", "to": "jo@example.com", "context": WELCOME_CONTEXT}
    assert transactional_enqueue_task({**base, **conf}, conf)["created"]
    assert not enqueue_one(tx_url, "welcome:k1 ").created
    assert scalar(tx_url, "SELECT count(*) FROM outreach.emails") == 1


def test_example_app_answers_concurrent_retries_of_one_signup_as_replays(tx_url, app_factory):
    app = app_factory()
    for round_ in range(5):
        key = str(uuid.uuid4())
        body = {"email": f"jo{round_}@example.com", "name": "Jo"}
        statuses: list[int] = []
        barrier = threading.Barrier(4)

        def post(barrier=barrier, statuses=statuses, body=body, key=key):
            barrier.wait(5)
            statuses.append(httpx.post(app.base + "/signup", json=body, headers={"Idempotency-Key": key},
                                       timeout=20).status_code)

        threads = [threading.Thread(target=post) for _ in range(4)]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
        assert sorted(statuses) == [200, 200, 200, 201], statuses
    assert signup_rows(tx_url) == (5, 5)
    other_body = httpx.post(app.base + "/signup", json={"email": "someone@example.com", "name": "X"},
                            headers={"Idempotency-Key": key}, timeout=10)
    assert other_body.status_code == 422
    taken = httpx.post(app.base + "/signup", json={"email": "jo0@example.com", "name": "Jo"},
                       headers={"Idempotency-Key": str(uuid.uuid4())}, timeout=10)
    assert taken.status_code == 409


def test_cli_sends_transactional_mail_without_unsubscribe_settings(tx_url, sink, tmp_path):
    """Found by the fresh-clone walkthrough: `outreach transactional send` asked for the
    unsubscribe URL and secret, which transactional mail never uses; and a missing SMTP
    connection was reported without its id."""
    enqueue_one(tx_url, "cli-1")
    env = {k: v for k, v in cli_env(tx_url, sink).items()
           if k not in ("OUTREACH_PUBLIC_URL", "OUTREACH_UNSUBSCRIBE_SECRET")
           and not k.startswith("AIRFLOW_CONN_")}
    cmd = ("transactional", "send")
    missing = clifork.run(cmd, env=env, timeout=120)
    # The mailbox cannot send at all: the run fails with one line naming the connection, and the
    # row goes back to the queue without spending an attempt (issue 12.6b).
    assert missing.returncode == 1 and "released=1" in missing.stdout, missing.stdout + missing.stderr
    [error] = [line for line in missing.stderr.splitlines() if line.startswith("outreach: error:")]
    assert "Airflow connection 'outreach_smtp_hello' failed at CONNECT" in error
    assert "outreach_smtp_hello" in scalar(tx_url, "SELECT last_error FROM outreach.emails")
    assert scalar(tx_url, "SELECT attempts FROM outreach.emails") == 0
    enqueue_one(tx_url, "cli-2", "kim@example.com")
    env["AIRFLOW_CONN_OUTREACH_SMTP_HELLO"] = sink.connection_json()
    sent = clifork.run(cmd, env=env, timeout=120)
    assert sent.returncode == 0 and "sent=2" in sent.stdout, sent.stdout + sent.stderr
    assert sorted(m["To"] for m in sink.messages()) == ["jo@example.com", "kim@example.com"]
