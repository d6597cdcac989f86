"""A sender interrupted (SIGTERM → SystemExit in the CLI, Ctrl-C, Airflow's task kill) records a
row whose message body was already going out as unconfirmed and puts every row it never handed off
back in the queue — wherever the interrupt lands (found by an adversarial review)."""

from __future__ import annotations

import datetime as dt
import inspect
import os
import signal
import subprocess
import sys
import time

import pytest

import outreach.send as send_mod
from outreach.airflow.connections import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due, reap
from support import invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import leads_csv, one_mailbox, point_mailboxes_at, rows
from support.paths import CAMPAIGN, MAILBOXES, ROOT, SMTP_CONN_IDS


def queued_on_mailbox_1(db_url: str, tmp_path, lines: list[str]) -> None:
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, lines))
    one_mailbox(db_url)
    queue_due(db_url)


def _interrupt_at_row_boundary():
    """A trace function raising SystemExit at the top of send_batch's row loop, after row 1."""
    src, start = inspect.getsourcelines(send_mod.send_batch)
    for_line = start + next(i for i, line in enumerate(src) if line.strip() == "for row in rows:")

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == for_line:
            p = frame.f_locals.get("progress")
            if p is not None and p.done == 1:
                sys.settrace(None)
                raise SystemExit(143)  # what cli.py's SIGTERM handler raises
        return local

    def glob(frame, event, arg):
        return local if frame.f_code is send_mod.send_batch.__code__ else None
    return glob


@pytest.mark.parametrize("first_action", ["rcpt_550", "accept"])
def test_interrupt_between_rows(db_url, tmp_path, monkeypatch, settings, first_action):
    queued_on_mailbox_1(db_url, tmp_path, ["first@ex.example,A,A", "second@ex.example,B,B"])
    with FaultSMTPServer({"first@ex.example": [first_action], "second@ex.example": ["accept"]}) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json())
        sys.settrace(_interrupt_at_row_boundary())
        try:
            with pytest.raises(SystemExit):
                send_mod.send_batch(db_url, 1, 10, smtp_connector, settings, worker="w")
        finally:
            sys.settrace(None)
        got = [m["To"] for m in smtp.messages()]
    state = rows(db_url, "SELECT l.email, e.status::text, e.failure_kind, e.last_error FROM outreach.emails e "
                         "JOIN outreach.leads l ON l.id = e.lead_id ORDER BY e.id")
    sup = rows(db_url, "SELECT value, reason::text FROM outreach.suppressions")
    second = next(s for s in state if s["email"] == "second@ex.example")
    # The second row was never handed off: back in the queue, with nobody else's outcome.
    assert second["status"] == "queued", (got, state, sup)


def test_interrupt_right_after_claim(db_url, sink, settings, tmp_path, monkeypatch):
    queued_on_mailbox_1(db_url, tmp_path, ["a@ex.example,A,A", "b@ex.example,B,B"])
    real_by_id = send_mod.mailboxes.mailbox_by_id

    def mailbox_by_id(conn, **params):
        raise SystemExit(143)  # SIGTERM lands during this round trip, after the claim

    monkeypatch.setattr(send_mod.mailboxes, "mailbox_by_id", mailbox_by_id)
    with pytest.raises(SystemExit):
        send_mod.send_batch(db_url, 1, 10, smtp_connector, settings, worker="w")
    monkeypatch.setattr(send_mod.mailboxes, "mailbox_by_id", real_by_id)
    reap(db_url, settings.reaper_threshold, now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    st = rows(db_url, "SELECT status::text AS s, failure_kind FROM outreach.emails ORDER BY id")
    assert sink.messages() == []
    assert all(r["s"] == "queued" for r in st), st


def test_interrupt_while_connecting(db_url, settings, tmp_path):
    queued_on_mailbox_1(db_url, tmp_path, ["a@ex.example,A,A"])

    def connector(conn_id):
        raise KeyboardInterrupt  # Ctrl-C / SIGTERM while the TCP connect or greeting is pending

    with pytest.raises(KeyboardInterrupt):
        send_mod.send_batch(db_url, 1, 10, connector, settings, worker="w")
    st = rows(db_url, "SELECT status::text AS s, failure_kind FROM outreach.emails")
    assert st == [{"s": "queued", "failure_kind": None}], st


# ---------------------------------------------------------------------------------------------
# F5: Ctrl-C (SIGINT) of `outreach send` while waiting for the reply to the end of DATA releases
#     the row back to the queue; the next run sends it again although the server had taken it
# ---------------------------------------------------------------------------------------------

def test_sigint_while_waiting_for_end_of_data_reply_never_resends(db_url, tmp_path):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["int@ex.example,I,Int"]))
    queue_due(db_url)
    with FaultSMTPServer({"int@ex.example": ["slow", "accept"]}, slow_seconds=5) as smtp:
        env = dict(os.environ, OUTREACH_DATABASE_URL=db_url, OUTREACH_HOME=str(ROOT),
                   AIRFLOW_HOME=str(tmp_path / "af"), OUTREACH_PUBLIC_URL="https://unsubscribe.test.example",
                   OUTREACH_UNSUBSCRIBE_SECRET="test-secret-0123456789")
        for conn_id in SMTP_CONN_IDS:
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = smtp.connection_json(timeout=20)
        env.pop("OUTREACH_FAILPOINTS", None)
        p = subprocess.Popen([sys.executable, "-m", "outreach.cli", "send"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not smtp.accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)  # the operator presses Ctrl-C
        out = p.communicate(timeout=60)[0]
        state_after_kill = rows(db_url, "SELECT status::text AS s, failure_kind, attempts FROM outreach.emails")
        # the next scheduled run
        p2 = subprocess.run([sys.executable, "-m", "outreach.cli", "send"], env=env,
                            capture_output=True, text=True, timeout=120)
        messages = smtp.messages()
    t = invariants.check(db_url, messages)
    assert not t.problems, (state_after_kill, out[-1500:], p2.stdout[-500:], t.problems)
