"""Several SMTP sessions of one send task at once (:func:`outreach.send.send_sessions`, issue 29),
on a real PostgreSQL and a real SMTP server on loopback that answers each message 0.1 s late:
a session that fails stops the others before their next row and nothing they had not handed over
stays claimed; a mailbox that cannot send at all stops nobody; an interrupted task (Airflow's
SIGTERM raises in the task's main thread) stops every session the same way. The DAG's side
(the plan packing the batches, real Airflow running them): tests/dags/test_send_sessions_dag.py."""

from __future__ import annotations

import json
import os
import signal
import threading
from types import SimpleNamespace

import psycopg
import pytest

from outreach.airflow.connections import smtp_connector
from outreach.dev.devsmtp import free_port
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.send import MailboxUnreachable, SendStopped, send_sessions
from support import invariants
from support.celerydeploy import CountingSink
from support.flow import leads_csv, rows
from support.paths import CAMPAIGN, MAILBOXES, SMTP_CONN_IDS

PER_MAILBOX = 20
LANES = [{"label": "lane anna", "quotas": [[1, PER_MAILBOX]]},
         {"label": "lane ben", "quotas": [[2, PER_MAILBOX]]}]


@pytest.fixture
def slow_sink(tmp_path, monkeypatch):
    """Every demo mailbox on one SMTP server answering each message 0.1 s late: a session of 20
    rows takes at least 2 s."""
    server = CountingSink(tmp_path / "maildir").start()
    server.reset(delay=0.1)
    for conn_id in SMTP_CONN_IDS:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", server.connection_json())
    yield server
    server.stop()


@pytest.fixture
def queued(db_url, tmp_path):
    """20 queued emails on mailbox 1 (anna) and 20 on mailbox 2 (ben), no cap in the way."""
    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, [f"s{i}@sessions{i}.example" for i in range(2 * PER_MAILBOX)]))
    with psycopg.connect(db_url) as c:
        c.execute("UPDATE outreach.enrollments SET mailbox_id = 1 + (id % 2)")
        c.execute("UPDATE outreach.mailboxes SET daily_cap = 100000, warmup_start = NULL")
    assert queue_due(db_url)["queued"] == 2 * PER_MAILBOX
    return db_url


def by_mailbox(url: str) -> dict[tuple[int, str], int]:
    return {(r["mailbox_id"], r["status"]): r["n"] for r in rows(url, """
        SELECT mailbox_id, status::text AS status, count(*) AS n FROM outreach.emails
        GROUP BY 1, 2""")}


def test_two_sessions_run_at_once_and_send_everything_once(queued, slow_sink, settings):
    lanes = send_sessions(queued, LANES, smtp_connector, settings, worker="sessions-test")
    assert [lane.sent for lane in lanes] == [PER_MAILBOX, PER_MAILBOX]
    assert slow_sink.peak >= 2
    totals = invariants.assert_ok(queued, slow_sink.messages())
    assert totals.sent_rows == len(slow_sink.messages()) == 2 * PER_MAILBOX


def test_a_failing_session_stops_the_other_and_leaves_nothing_claimed(queued, slow_sink, settings):
    # Mailbox 2's send log cannot be written: its session hands one message over, cannot record
    # it and raises. Mailbox 1's session, 2 s of work, stops before its next row.
    with psycopg.connect(queued) as c:
        c.execute("""CREATE FUNCTION outreach.test_break_ledger() RETURNS trigger LANGUAGE plpgsql
                     AS $$ BEGIN RAISE EXCEPTION 'injected: send log unavailable'; END $$;
                     CREATE TRIGGER test_break_ledger BEFORE INSERT ON outreach.send_log
                     FOR EACH ROW WHEN (NEW.mailbox_id = 2) EXECUTE FUNCTION outreach.test_break_ledger()""")
    with pytest.raises(psycopg.Error, match="injected: send log unavailable"):
        send_sessions(queued, LANES, smtp_connector, settings, worker="sessions-test")
    counts = by_mailbox(queued)
    assert 1 <= counts.get((1, "sent"), 0) < PER_MAILBOX, counts
    assert counts.get((1, "sent"), 0) + counts.get((1, "queued"), 0) == PER_MAILBOX, counts
    assert counts.get((1, "sending"), 0) == 0, counts
    # Mailbox 2: the one message handed over but unrecorded stays 'sending' for the reaper
    # (unconfirmed: never resent); its other rows are back in the queue.
    assert counts.get((2, "sending"), 0) == 1 and counts.get((2, "queued"), 0) == PER_MAILBOX - 1, counts
    released = rows(queued, "SELECT attempts FROM outreach.emails WHERE status = 'queued'")
    assert {r["attempts"] for r in released} == {0}
    assert len(slow_sink.messages()) == counts.get((1, "sent"), 0) + 1


def test_a_mailbox_that_cannot_send_stops_no_other_session(queued, slow_sink, settings, monkeypatch):
    closed = json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": free_port(),
                         "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 1,
                                   "retry_limit": 0}})
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_BEN", closed)
    with pytest.raises(MailboxUnreachable) as exc:
        send_sessions(queued, LANES, smtp_connector, settings, worker="sessions-test")
    assert [f["conn_id"] for f in exc.value.failures] == ["outreach_smtp_ben"]
    counts = by_mailbox(queued)
    assert counts == {(1, "sent"): PER_MAILBOX, (2, "queued"): PER_MAILBOX}, counts
    assert sum(s.sent for s in exc.value.summaries) == PER_MAILBOX


class Terminated(BaseException):
    """What Airflow's SIGTERM handler raises in a task's main thread (``AirflowTaskTerminated``)."""


def interrupted_sessions(url: str, settings, raising, first: float, every: float = 0.0) -> None:
    """Run :data:`LANES` in ``send_sessions`` while SIGALRM calls ``raising`` (which raises in
    this, the main thread) after ``first`` seconds, then every ``every`` (0: once); the handler
    and the timer are restored after."""
    previous = signal.signal(signal.SIGALRM, raising)
    signal.setitimer(signal.ITIMER_REAL, first, every)
    try:
        send_sessions(url, LANES, smtp_connector, settings, worker="sessions-test")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupted_task_stops_every_session_and_releases_their_rows(queued, slow_sink, settings):
    def terminate(signum, frame):
        raise Terminated("SIGTERM")

    with pytest.raises(Terminated):  # at 0.8 s both sessions are mid-way (2 s of work each)
        interrupted_sessions(queued, settings, terminate, 0.8)
    counts = by_mailbox(queued)
    for mailbox in (1, 2):
        assert counts.get((mailbox, "sending"), 0) == 0, counts
        assert 1 <= counts.get((mailbox, "sent"), 0) < PER_MAILBOX, counts
    totals = invariants.assert_ok(queued, slow_sink.messages())
    assert totals.sent_rows == len(slow_sink.messages()) < 2 * PER_MAILBOX


def test_a_second_interrupt_waits_for_the_sessions_to_give_their_rows_back(queued, slow_sink, settings):
    # Ctrl-C, then Ctrl-C twice more 0.3 s apart while the sessions end their current rows (the
    # relay takes 1 s a message): each session still stops before its next row and gives the
    # rest back; nothing stays 'sending'.
    slow_sink.reset(delay=1.0)
    interrupts = []

    def interrupt(signum, frame):
        interrupts.append(1)
        if len(interrupts) >= 3:
            signal.setitimer(signal.ITIMER_REAL, 0)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted_sessions(queued, settings, interrupt, 1.5, 0.3)
    assert len(interrupts) == 3
    assert not [t for t in threading.enumerate() if t.name.startswith("smtp-session") and t.is_alive()]
    counts = by_mailbox(queued)
    for mailbox in (1, 2):
        assert counts.get((mailbox, "sending"), 0) == 0, counts
    totals = invariants.assert_ok(queued, slow_sink.messages())
    assert totals.sent_rows == len(slow_sink.messages()) < 2 * PER_MAILBOX


def task_env(monkeypatch, url: str) -> None:
    """What an Airflow worker gives the send task here: this database, the test settings."""
    for k, v in {"OUTREACH_DATABASE_URL": url, "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                 "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                 "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                 "OUTREACH_SMTP_TIMEOUT": "5"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AIRFLOW_CONN_OUTREACH_DB", raising=False)


def task_context(pool_slots: int | None = None) -> dict:
    ti = SimpleNamespace(dag_id="outreach_send", run_id="manual__sessions", task_id="send_batch",
                         map_index=0, try_number=1)
    if pool_slots is not None:
        ti.task = SimpleNamespace(pool_slots=pool_slots)
    return {"ti": ti}


def test_airflow_stopping_the_send_task_stops_its_sessions(queued, slow_sink, monkeypatch):
    # Airflow stops a task with SIGTERM, whose handler in the task runner raises nothing (it
    # calls the operator's on_kill), then SIGKILL 5 s later: the sessions must stop at the
    # SIGTERM and give their rows back, not run on until the SIGKILL.
    from outreach.airflow import tasks_send

    task_env(monkeypatch, queued)
    airflows_handler = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    timer = threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        with pytest.raises(SendStopped, match="the task was stopped: 2 of 2 session"):
            tasks_send.send_task({"label": "two at once", "limit": 40, "quotas": [], "sessions": LANES},
                                 task_context())
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, airflows_handler)
    counts = by_mailbox(queued)
    for mailbox in (1, 2):
        assert counts.get((mailbox, "sending"), 0) == 0, counts
        assert 1 <= counts.get((mailbox, "sent"), 0) < PER_MAILBOX, counts
    assert signal.getsignal(signal.SIGTERM) is airflows_handler
    totals = invariants.assert_ok(queued, slow_sink.messages())
    assert totals.sent_rows == len(slow_sink.messages())


@pytest.mark.timeout(60)  # unstopped, the task would wait a 60-90 s gap before each of 19 rows
def test_airflow_stopping_a_one_session_send_task_in_its_gap_stops_it(queued, slow_sink, monkeypatch):
    # A plan of one batch (or OUTREACH_SEND_SESSIONS_PER_TASK=1) gives a task of one session; it
    # must stop at the SIGTERM too, also while it waits out the mailbox's gap between two rows,
    # not send on after Airflow gave up on it (a deployment stopped with Ctrl-C).
    from outreach.airflow import tasks_send

    task_env(monkeypatch, queued)
    monkeypatch.setenv("OUTREACH_SEND_GAP_SECONDS", "60")
    airflows_handler = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        with pytest.raises(SendStopped, match="the task was stopped: 1 of 1 session"):
            tasks_send.send_task({**LANES[0], "limit": PER_MAILBOX}, task_context())
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, airflows_handler)
    counts = by_mailbox(queued)
    assert counts == {(1, "sent"): 1, (1, "queued"): PER_MAILBOX - 1,
                      (2, "queued"): PER_MAILBOX}, counts
    assert signal.getsignal(signal.SIGTERM) is airflows_handler
    totals = invariants.assert_ok(queued, slow_sink.messages())
    assert totals.sent_rows == len(slow_sink.messages()) == 1


def test_a_send_task_runs_no_more_sessions_at_once_than_its_pool_slots(queued, slow_sink, monkeypatch,
                                                                       caplog):
    # The plan may have packed more batches than the task's own pool_slots (another process's
    # setting): the task runs them, but never more at once than the slots it holds.
    from outreach.airflow import tasks_send

    task_env(monkeypatch, queued)
    with caplog.at_level("INFO", logger="outreach"):
        result = tasks_send.send_task({"label": "two, one slot", "limit": 40, "quotas": [],
                                       "sessions": LANES}, task_context(pool_slots=1))
    assert result["sent"] == 2 * PER_MAILBOX
    assert any("2 session(s), 1 at once" in r.getMessage() for r in caplog.records), caplog.text
