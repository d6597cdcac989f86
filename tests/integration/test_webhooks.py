"""Signed webhooks out (issue 26, item 4; outreach.webhooks, migration 0130) against a real loopback
HTTP receiver that verifies every post with the ``standardwebhooks`` library: each subscribed
event arrives, exactly once after de-duplication by ``webhook-id``, through 500s, a receiver down
and restarted, and a transaction that commits its event after younger ones; a dead delivery is
sent again by ``outreach webhooks replay``; two delivery runs at once never post one twice."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import threading
from collections import Counter

import psycopg
import pytest

from outreach.settings import WebhookSettings
from outreach.webhooks import UnsafeDestination, add_endpoint, deliver, destination, enqueue
from support.flow import outreach, rows
from support.webhookreceiver import Receiver

SECRET_VAR = "OUTREACH_TEST_WEBHOOK_SECRET"


@pytest.fixture(autouse=True)
def loopback_receivers(monkeypatch) -> None:
    """The receivers here listen on 127.0.0.1: allowed as a user allows a receiver on their own
    machine (the default refusal: test_a_non_public_destination_is_refused_when_added_and_posted)."""
    monkeypatch.setenv("OUTREACH_WEBHOOK_ALLOW_PRIVATE", "true")


@pytest.fixture
def secret(monkeypatch) -> str:
    value = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv(SECRET_VAR, value)
    return value


@pytest.fixture
def receiver(secret):
    rx = Receiver(secret).start()
    yield rx
    rx.stop()


def read_secret(ref: str) -> str:
    assert ref == f"env:{SECRET_VAR}"
    return os.environ[SECRET_VAR]


def add_events(url: str, kinds: list[str]) -> list[int]:
    """Insert events (one transaction); return their ids."""
    with psycopg.connect(url) as conn:
        return [conn.execute("INSERT INTO outreach.events (kind, payload) VALUES (%s, %s)"
                             " RETURNING id", (k, json.dumps({"n": i}))).fetchone()[0]
                for i, k in enumerate(kinds)]


def db_now(url: str) -> dt.datetime:
    return rows(url, "SELECT now() AS t")[0]["t"]


def statuses(url: str) -> dict[int, tuple[str, int]]:
    return {r["event_id"]: (r["status"], r["attempts"]) for r in rows(
        url, "SELECT event_id, status, attempts FROM outreach.webhook_deliveries")}


SETTINGS = WebhookSettings(webhook_timeout=5, webhook_max_attempts=8,
                           webhook_retry_base_seconds=60, webhook_retry_cap_seconds=900,
                           webhook_batch_size=4, webhook_run_seconds=60, webhook_allow_private=True)


def test_every_event_arrives_once_after_dedup_through_500s_a_restart_and_a_late_commit(
        db_url, receiver):
    receiver.fail_first = 6  # recorded, then answered 500: the sender must post them again
    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["replied", "bounced"],
                 secret_ref=f"env:{SECRET_VAR}")
    first = add_events(db_url, ["replied", "bounced", "sent", "replied", "replied", "bounced",
                                "replied", "bounced", "replied"])
    # A transaction that writes its event now and commits only after younger ones did.
    late = psycopg.connect(db_url)
    late_id = late.execute("INSERT INTO outreach.events (kind) VALUES ('replied') RETURNING id"
                           ).fetchone()[0]
    second = add_events(db_url, ["bounced", "sent", "replied", "replied", "bounced"])
    kinds = {r["id"]: r["kind"] for r in rows(db_url, "SELECT id, kind FROM outreach.events")}
    kinds[late_id] = "replied"  # not committed yet: not visible to that read
    clock = db_now(db_url)

    enqueue(db_url, now=clock)
    # The late transaction is open: nothing at or above its boundary is taken yet.
    assert set(statuses(db_url)) == {i for i in first if kinds[i] != "sent"}
    deliver(db_url, secret=read_secret, settings=SETTINGS, now=clock)

    receiver.stop()  # down: every due post is refused
    late.commit()
    late.close()
    clock += dt.timedelta(minutes=5)
    enqueue(db_url, now=clock)
    result = deliver(db_url, secret=read_secret, settings=SETTINGS, now=clock)
    assert result.delivered == 0 and result.retried > 0

    receiver.start()  # back, on the same port
    for _ in range(10):
        clock += dt.timedelta(minutes=20)
        enqueue(db_url, now=clock)
        deliver(db_url, secret=read_secret, settings=SETTINGS, now=clock)
        if all(s == "delivered" for s, _ in statuses(db_url).values()):
            break

    expected = {i for i in [*first, late_id, *second] if kinds[i] != "sent"}
    assert receiver.refused == []  # every signature verified
    unique = receiver.unique()
    assert set(unique) == {f"evt_{i}" for i in expected}  # none missing, none extra
    assert len(receiver.received) > len(unique)  # duplicates did happen, de-duplicated by id
    for msg_id, data in unique.items():
        event_id = int(msg_id.removeprefix("evt_"))
        assert data["type"] == kinds[event_id] and data["data"]["event_id"] == event_id
    assert {s for s, _ in statuses(db_url).values()} == {"delivered"}
    assert set(statuses(db_url)) == expected


def test_a_dead_delivery_is_sent_again_by_the_cli_replay(db_url, receiver):
    receiver.fail_first = 10**6
    before = add_events(db_url, ["replied"])  # before the endpoint: not queued by enqueue
    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["*"],
                 secret_ref=f"env:{SECRET_VAR}")
    [event_id] = add_events(db_url, ["complained"])
    settings = SETTINGS.replace(webhook_max_attempts=2)
    clock = db_now(db_url)
    enqueue(db_url, now=clock)
    deliver(db_url, secret=read_secret, settings=settings, now=clock)
    clock += dt.timedelta(minutes=2)
    assert deliver(db_url, secret=read_secret, settings=settings, now=clock).dead == 1
    assert statuses(db_url) == {event_id: ("dead", 2)}

    receiver.fail_first = 0
    clock += dt.timedelta(hours=1)
    assert deliver(db_url, secret=read_secret, settings=settings, now=clock).delivered == 0
    p = outreach(db_url, "webhooks", "replay", "--endpoint", "crm", "--dead")
    assert p.returncode == 0, p.stderr
    assert "1 delivery(ies) due again" in p.stdout
    assert deliver(db_url, secret=read_secret, settings=settings).delivered == 1
    assert statuses(db_url) == {event_id: ("delivered", 1)}
    assert receiver.received[-1][0] == f"evt_{event_id}"

    p = outreach(db_url, "webhooks", "replay", "--endpoint", "crm", "--since-event", str(before[0]))
    assert p.returncode == 0 and "1 added" in p.stdout, p.stdout + p.stderr
    assert deliver(db_url, secret=read_secret, settings=settings).delivered == 2
    assert {m for m, _ in receiver.received[-2:]} == {f"evt_{before[0]}", f"evt_{event_id}"}
    p = outreach(db_url, "webhooks", "list")
    assert "crm\tenabled\t127.0.0.1:" in p.stdout and "delivered 2, dead 0" in p.stdout, p.stdout


def test_two_delivery_runs_at_once_never_post_the_same_delivery_twice(db_url, receiver):
    receiver.delay = 0.02
    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["*"],
                 secret_ref=f"env:{SECRET_VAR}")
    ids = add_events(db_url, ["replied"] * 40)
    enqueue(db_url)
    settings = SETTINGS.replace(webhook_batch_size=2)
    results = []
    start = threading.Barrier(2)

    def run() -> None:
        start.wait()
        results.append(deliver(db_url, secret=read_secret, settings=settings))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    posts = Counter(m for m, _ in receiver.received)
    assert [m for m, n in posts.items() if n > 1] == []
    assert set(posts) == {f"evt_{i}" for i in ids}
    assert sorted(r.delivered for r in results) and all(r.delivered > 0 for r in results), results
    assert sum(r.delivered for r in results) == 40


def test_enqueues_at_once_while_events_commit_out_of_order_leave_no_gap(db_url, receiver):
    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["replied"],
                 secret_ref=f"env:{SECRET_VAR}")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        # Each transaction writes its event, then waits a little before committing, so ids and
        # commits interleave across writers.
        try:
            for i in range(25):
                with psycopg.connect(db_url) as conn:
                    conn.execute("INSERT INTO outreach.events (kind, payload) VALUES"
                                 " ('replied', %s)", (json.dumps({"w": n, "i": i}),))
                    conn.execute("SELECT pg_sleep(%s)", ((i * 7 + n * 3) % 5 / 200,))
        except BaseException as exc:  # noqa: BLE001 (reported by the test below)
            errors.append(exc)

    def enqueuer() -> None:
        try:
            while not stop.is_set():
                enqueue(db_url)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    enqueuers = [threading.Thread(target=enqueuer) for _ in range(2)]
    for t in [*writers, *enqueuers]:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in enqueuers:
        t.join(120)
    assert errors == []
    enqueue(db_url)  # every writer has ended: this one takes whatever is left
    events = {r["id"] for r in rows(db_url, "SELECT id FROM outreach.events")}
    assert len(events) == 75
    assert set(statuses(db_url)) == events


def test_a_missing_secret_fails_the_attempt_without_posting_or_naming_a_value(db_url, receiver,
                                                                               monkeypatch):
    from outreach.airflow.connections import named_secret

    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["*"],
                 secret_ref="env:OUTREACH_TEST_NO_SUCH_SECRET")
    monkeypatch.delenv("OUTREACH_TEST_NO_SUCH_SECRET", raising=False)
    [event_id] = add_events(db_url, ["replied"])
    enqueue(db_url)
    assert deliver(db_url, secret=named_secret, settings=SETTINGS).retried == 1
    assert receiver.received == []
    [row] = rows(db_url, "SELECT status, attempts, last_error FROM outreach.webhook_deliveries")
    assert row["status"] == "pending" and row["attempts"] == 1
    assert "env:OUTREACH_TEST_NO_SUCH_SECRET is not set" in row["last_error"]


def test_an_endpoint_url_httpx_cannot_parse_fails_its_attempt_not_the_run(db_url, receiver):
    # Stored before add_endpoint checked URLs (it refuses this one now).
    with pytest.raises(UnsafeDestination, match="cannot be parsed"):
        add_endpoint(db_url, name="broken", endpoint_url="http://127.0.0.1:0x/hook",
                     event_kinds=["*"], secret_ref=f"env:{SECRET_VAR}")
    rows(db_url, "INSERT INTO outreach.webhook_endpoints (name, url, event_kinds, secret_ref)"
                 " VALUES ('broken', 'http://127.0.0.1:0x/hook', '{*}', %s) RETURNING id",
         (f"env:{SECRET_VAR}",))
    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["*"],
                 secret_ref=f"env:{SECRET_VAR}")
    [event_id] = add_events(db_url, ["replied"])
    enqueue(db_url)
    result = deliver(db_url, secret=read_secret, settings=SETTINGS)
    assert (result.delivered, result.retried) == (1, 1)
    assert [m for m, _ in receiver.received] == [f"evt_{event_id}"]
    [row] = rows(db_url, "SELECT last_error FROM outreach.webhook_deliveries WHERE status = 'pending'")
    assert row["last_error"].startswith("webhook URL cannot be parsed") and "0x/hook" not in row["last_error"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/hook", "http://localhost/hook",
                                 "http://169.254.169.254/latest/meta-data/", "https://10.1.2.3/x",
                                 "http://[::1]:9000/hook", "ftp://crm.example/hook"])
def test_a_non_public_destination_is_refused_when_added(db_url, monkeypatch, url):
    monkeypatch.delenv("OUTREACH_WEBHOOK_ALLOW_PRIVATE")
    p = outreach(db_url, "webhooks", "add", "crm", "--url", url, "--events", "*",
                 "--secret", f"env:{SECRET_VAR}")
    assert p.returncode != 0, p.stdout + p.stderr
    assert ("OUTREACH_WEBHOOK_ALLOW_PRIVATE" in p.stderr or "http:// or https://" in p.stderr), p.stderr
    assert "/hook" not in p.stderr and "meta-data" not in p.stderr  # the path may hold a token
    assert rows(db_url, "SELECT * FROM outreach.webhook_endpoints") == []


def test_a_public_address_passes_the_check_without_connecting():
    assert destination("https://93.184.215.14/hook?t=1", allow_private=False) == (
        "93.184.215.14", "93.184.215.14")


def test_an_endpoint_that_turned_private_is_not_posted_to(db_url, receiver, secret):
    """Added while the setting was on (or its name resolved elsewhere then): each post checks the
    destination again, so with the setting off nothing reaches the loopback receiver."""
    add_endpoint(db_url, name="crm", endpoint_url=receiver.url, event_kinds=["*"],
                 secret_ref=f"env:{SECRET_VAR}")
    add_events(db_url, ["replied"])
    enqueue(db_url)
    strict = SETTINGS.model_copy(update={"webhook_allow_private": False})
    assert deliver(db_url, secret=read_secret, settings=strict).retried == 1
    assert receiver.received == []
    [row] = rows(db_url, "SELECT status, last_error FROM outreach.webhook_deliveries")
    assert row["status"] == "pending" and "non-public address (127.0.0.1)" in row["last_error"]
    assert receiver.url not in row["last_error"]
    assert deliver(db_url, secret=read_secret, settings=SETTINGS,
                   now=db_now(db_url) + dt.timedelta(hours=1)).delivered == 1
