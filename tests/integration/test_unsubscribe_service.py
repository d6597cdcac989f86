"""The one-click unsubscribe service, running (uvicorn on loopback), spoken to over real HTTP
(httpx), with real PostgreSQL and the real aiosmtpd sink."""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse

import httpx
import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from outreach import tokens
from outreach.dev.devsmtp import free_port
from outreach.queue import queue_due
from outreach.tokens import make_token
from outreach.web.unsubscribe_app import create_app
from support import invariants
from support.flow import import_demo, rows, scalar, send_all
from support.webservice import RunningService

ONE_CLICK = {"List-Unsubscribe": "One-Click"}


@pytest.fixture
def service(db_url, settings):
    # The app gets callables, as in the Airflow plugin: resolved at the first request.
    with RunningService(create_app(lambda: db_url, lambda: settings.unsubscribe_secret)) as svc:
        yield svc


def multipart(fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = "----outreach-test-boundary"
    body = "".join(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
                   for k, v in fields.items()) + f"--{boundary}--\r\n"
    return body.encode(), f"multipart/form-data; boundary={boundary}"


def unsubscribe_path(message) -> str:
    """The https URL of a received message's List-Unsubscribe header, as a path."""
    header = message["List-Unsubscribe"]
    https = next(part.strip(" <>") for part in header.split(",") if "https://" in part)
    return urllib.parse.urlsplit(https).path


def suppressions_of(url: str, address: str) -> int:
    return scalar(url, "SELECT count(*) FROM outreach.suppressions WHERE value = %s", (address,))


def test_unsubscribe_by_real_post_between_queueing_and_sending(db_url, sink, settings, service):
    """Step 1 goes out; step 2 is queued; two leads click one-click (urlencoded and multipart)
    in the List-Unsubscribe URL of the message they got; step 2 reaches everybody else."""
    import_demo(db_url)
    queue_due(db_url)
    send_all(db_url, settings)
    first = sink.messages()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3, minutes=5)
    queued = queue_due(db_url, now=later)["queued"]
    assert queued == len(first)
    alice, bob = first[0], first[1]
    with httpx.Client(follow_redirects=False) as client:
        r1 = client.post(service.url(unsubscribe_path(alice)), data=ONE_CLICK)
        body, ctype = multipart(ONE_CLICK)
        r2 = client.post(service.url(unsubscribe_path(bob)), content=body,
                         headers={"Content-Type": ctype})
    for r in (r1, r2):
        assert r.status_code == 200, r.text
        assert "set-cookie" not in r.headers and "location" not in r.headers
        assert "You are unsubscribed" in r.text
    for m in (alice, bob):
        lead = m["X-RcptTo"]
        assert suppressions_of(db_url, lead) == 1
        # Cancelled at once, in the unsubscribe's own transaction, before any sender ran.
        assert rows(db_url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                            " ON l.id = e.lead_id JOIN outreach.sequence_steps st ON st.id = e.step_id"
                            " WHERE l.email = %s AND st.position = 2", (lead,)) == [{"s": "suppressed"}]
    send_all(db_url, settings, now=later)
    messages = sink.messages()
    assert len(messages) == 2 * len(first) - 2
    for m in (alice, bob):
        assert [x["X-Outreach-Step"] for x in messages if x["X-RcptTo"] == m["X-RcptTo"]] == ["q4-ops-intro/1"]
    event = rows(db_url, "SELECT action, reason, source, actor FROM outreach.suppression_events"
                         " WHERE value = %s", (alice["X-RcptTo"],))
    assert len(event) == 1 and event[0]["action"] == "suppress" and event[0]["reason"] == "unsubscribed"
    assert event[0]["source"].startswith("one-click:email:")
    invariants.assert_ok(db_url, messages)


def test_get_shows_a_button_and_never_unsubscribes(db_url, settings, service):
    import_demo(db_url)
    queue_due(db_url)
    email_id, address = rows(db_url, "SELECT e.id, l.email FROM outreach.emails e JOIN outreach.leads l"
                                     " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0].values()
    path = "/unsubscribe/" + make_token(settings.unsubscribe_secret, email_id)
    with httpx.Client() as client:
        for _ in range(3):  # a link scanner, a preview, the person
            page = client.get(service.url(path))
            assert page.status_code == 200
        assert '<form method="post">' in page.text and 'name="List-Unsubscribe" value="One-Click"' in page.text
        assert address not in page.text  # masked
        assert suppressions_of(db_url, address) == 0
        assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'suppressed'") == 0
        # The button posts exactly what the form holds.
        assert client.post(service.url(path), data=ONE_CLICK).status_code == 200
        assert suppressions_of(db_url, address) == 1
        assert "You are unsubscribed" in client.get(service.url(path)).text


def test_replayed_tampered_forged_expired_and_unknown_tokens(db_url, settings, service):
    import_demo(db_url)
    queue_due(db_url)
    email_id, address = rows(db_url, "SELECT e.id, l.email FROM outreach.emails e JOIN outreach.leads l"
                                     " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0].values()
    other_id = scalar(db_url, "SELECT max(id) FROM outreach.emails")
    secret = settings.unsubscribe_secret
    token = make_token(secret, email_id)
    tampered = token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB")
    forged = make_token("not-the-secret-000000", other_id)  # someone else's row, wrong key
    swapped = make_token(secret, other_id).split(".")[0] + "." + ".".join(token.split(".")[1:])

    class Past(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - tokens.MAX_AGE_SECONDS - 3600

    expired = URLSafeTimedSerializer(secret, salt=tokens._SALT, signer=Past).dumps(email_id)
    before = scalar(db_url, "SELECT count(*) FROM outreach.suppression_events")
    with httpx.Client(follow_redirects=False) as client:
        def post(tok: str) -> httpx.Response:
            return client.post(service.url("/unsubscribe/" + tok), data=ONE_CLICK)

        assert [post(token).status_code for _ in range(3)] == [200, 200, 200]  # replay is harmless
        for bad in (tampered, forged, swapped, "not-a-token", "x" * 600, "%00%0d%0a"):
            r = post(bad)
            assert r.status_code == 400 and "not valid" in r.text, (bad, r.status_code)
            assert client.get(service.url("/unsubscribe/" + bad)).status_code == 400
        r = post(expired)
        assert r.status_code == 410 and "expired" in r.text
        r = post(make_token(secret, 10_000_000))
        assert r.status_code == 404 and "Unknown" in r.text
        no_body = client.post(service.url("/unsubscribe/" + make_token(secret, other_id)))
        assert no_body.status_code == 400
        broken = client.post(service.url("/unsubscribe/" + make_token(secret, other_id)),
                             content=b"--x\r\ngarbage", headers={"Content-Type": "multipart/form-data; boundary=x"})
        assert broken.status_code == 400
    # One suppression, one history row: only the genuine token changed anything, once.
    assert suppressions_of(db_url, address) == 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppression_events") == before + 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'suppressed'") == 1


def test_no_secret_or_no_database_is_a_503_not_a_500(db_url):
    def no_secret() -> str:
        raise RuntimeError("no secret configured")

    with RunningService(create_app(db_url, no_secret)) as svc, httpx.Client() as client:
        assert client.post(svc.url("/unsubscribe/abc"), data=ONE_CLICK).status_code == 503
    token = make_token("test-secret-0123456789", 1)
    gone = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"
    with RunningService(create_app(gone, "test-secret-0123456789")) as svc, httpx.Client() as client:
        assert client.post(svc.url("/unsubscribe/" + token), data=ONE_CLICK).status_code == 503
        assert client.get(svc.url("/unsubscribe/" + token)).status_code == 503


def test_outreach_serve_unsubscribe_command(db_url, settings):
    """The standalone command: a real `outreach serve-unsubscribe` process."""
    import os
    import subprocess
    import sys

    import_demo(db_url)
    queue_due(db_url)
    email_id, address = rows(db_url, "SELECT e.id, l.email FROM outreach.emails e JOIN outreach.leads l"
                                     " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0].values()
    port = free_port()
    env = {**os.environ, "OUTREACH_DATABASE_URL": db_url,
           "OUTREACH_UNSUBSCRIBE_SECRET": settings.unsubscribe_secret}
    proc = subprocess.Popen([sys.executable, "-m", "outreach.cli", "serve-unsubscribe",
                             "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/unsubscribe/" + make_token(settings.unsubscribe_secret, email_id)
        with httpx.Client(timeout=60) as client:  # the first request resolves the secret (Airflow)
            for _ in range(600):  # until it listens (bounded), not a timed assertion
                try:
                    r = client.post(url, data=ONE_CLICK)
                    break
                except httpx.ConnectError:
                    assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
                    time.sleep(0.05)
            else:
                raise AssertionError("serve-unsubscribe did not start listening")
        assert r.status_code == 200 and "server" not in r.headers
        assert suppressions_of(db_url, address) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_secret_from_the_environment_or_the_airflow_connection(monkeypatch):
    import json

    from outreach.airflow import connections
    from outreach.settings import SettingsError

    monkeypatch.delenv("OUTREACH_UNSUBSCRIBE_SECRET", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_OUTREACH_UNSUBSCRIBE", raising=False)
    with pytest.raises(SettingsError, match="outreach_unsubscribe"):
        connections.unsubscribe_secret()
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_UNSUBSCRIBE",
                       json.dumps({"conn_type": "generic", "password": "from-connection-0123456789"}))
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", "https://u.example/outreach")
    assert connections.unsubscribe_secret() == "from-connection-0123456789"
    # The sender signs with the same secret the service checks.
    assert connections.settings().unsubscribe_secret == "from-connection-0123456789"
    assert connections.settings().unsubscribe_base == "https://u.example/outreach/unsubscribe/"
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", "from-environment-0123456789")
    assert connections.unsubscribe_secret() == "from-environment-0123456789"


def test_a_body_over_the_cap_gets_413_and_changes_nothing(db_url, settings, service):
    """Issue 31: a 1 MB body, declared or chunked (no Content-Length), gets 413 from the running
    app without being read whole; a body at the cap is still understood."""
    from outreach.web.unsubscribe_app import MAX_BODY_BYTES

    import_demo(db_url)
    queue_due(db_url)
    email_id, address = rows(db_url, "SELECT e.id, l.email FROM outreach.emails e JOIN outreach.leads l"
                                     " ON l.id = e.lead_id ORDER BY e.id LIMIT 1")[0].values()
    url = service.url("/unsubscribe/" + make_token(settings.unsubscribe_secret, email_id))
    big, form = multipart({**ONE_CLICK, "padding": "p" * (1 << 20)})
    assert len(big) > 1 << 20

    def chunks():  # a generator body: httpx sends it chunked, without Content-Length
        for start in range(0, len(big), 16_384):
            yield big[start:start + 16_384]

    with httpx.Client() as client:
        declared = client.post(url, content=big, headers={"Content-Type": form})
        assert declared.status_code == 413, declared.text
        assert f"at most {MAX_BODY_BYTES} bytes" in declared.text
        chunked = client.post(url, content=chunks(), headers={"Content-Type": form})
        assert chunked.status_code == 413, chunked.text
        assert "content-length" not in chunked.request.headers
        assert suppressions_of(db_url, address) == 0
        padded, form = multipart({**ONE_CLICK, "padding": "p" * (MAX_BODY_BYTES - 300)})
        assert len(padded) <= MAX_BODY_BYTES
        assert client.post(url, content=padded, headers={"Content-Type": form}).status_code == 200
    assert suppressions_of(db_url, address) == 1
