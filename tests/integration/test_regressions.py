"""Regression tests from an adversarial review of the send path (each was a reproduction of a
real way to break the promise before it was fixed): IDN domain suppressions, a NUL byte in one
CSV row, a template raising a non-Jinja error for one lead, Ctrl-C while waiting for the reply to
the end of DATA, an unparseable reply to the end of DATA, a subject typo, and random external
kills. Plus the heartbeat that keeps a sender from handing off a row the reaper took."""

from __future__ import annotations

import asyncio
import datetime as dt
import email
import email.policy
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from outreach.airflow.connections import smtp_connector
from outreach.dev.devsmtp import LoopbackSMTPServer
from outreach.leads import import_leads
from outreach.queue import queue_due, reap
from outreach.send import send_batch
from outreach.suppression import import_suppressions
from support import invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import leads_csv, one_mailbox, point_mailboxes_at, rows, scalar
from support.paths import CAMPAIGN, MAILBOXES, ROOT, SMTP_CONN_IDS

# ---------------------------------------------------------------------------------------------
# F1: a whole-domain suppression of an IDN domain never matches (send to opted-out)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dnc_entry", ["@bücher.de", "@xn--bcher-kva.de"])
def test_idn_domain_suppression_is_honoured(db_url, sink, settings, tmp_path, dnc_entry):
    dnc = tmp_path / "dnc.csv"
    dnc.write_text(f"email\n{dnc_entry}\n", encoding="utf-8")
    assert import_suppressions(db_url, dnc).added == 1
    r = import_leads(db_url, CAMPAIGN, MAILBOXES,
                     leads_csv(tmp_path, ["jane@bücher.de,Jane,Bücher", "max@xn--bcher-kva.de,Max,Bücher"]))
    queue_due(db_url)
    for mb in (1, 2):
        send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk")
    got = [m["X-RcptTo"] for m in sink.messages()]
    stored = rows(db_url, "SELECT kind, value FROM outreach.suppressions")
    assert got == [], (f"suppressed domain {dnc_entry!r} (stored {stored}) still received {got}; "
                       f"import said suppressed={r.suppressed}")


# ---------------------------------------------------------------------------------------------
# F2: one NUL byte in one row makes the whole leads import fail (nothing imported)
# ---------------------------------------------------------------------------------------------

def test_nul_in_one_row_does_not_stop_the_rest(db_url, tmp_path):
    p = tmp_path / "nul.csv"
    p.write_bytes(b"Email,First Name,Company\ngood1@ex.example,Ann,A\n"
                  b"nul@ex.example,B\x00ob,B\ngood2@ex.example,Cy,C\n")
    try:
        r = import_leads(db_url, CAMPAIGN, MAILBOXES, p)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"import of a file with one NUL byte failed as a whole: {type(exc).__name__}: {exc}")
    assert r.imported >= 2


# ---------------------------------------------------------------------------------------------
# F3: a template raising a non-Jinja exception for one lead aborts the batch, and the row is
#     released (attempts reset) so every later batch dies on it again: a poison row.
# ---------------------------------------------------------------------------------------------

def test_template_raising_for_one_lead_does_not_stop_the_batch(db_url, sink, settings, tmp_path, monkeypatch):
    tdir = tmp_path / "templates"
    shutil.copytree(ROOT / "include" / "templates", tdir)
    # 100 // len(company): fine for every lead except the one with an empty Company.
    for suffix in ("txt.j2", "html.j2"):
        src = (tdir / f"ops_intro.{suffix}").read_text()
        (tdir / f"ops_intro.{suffix}").write_text(
            "{% set n = lead.company|length %}Score {{ 100 // n }}\n" + src)
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(tdir))
    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, ["a1@ex.example,A,Acme", "a2@ex.example,B,", "a3@ex.example,C,Acme",
                                   "a4@ex.example,D,Acme"]))
    one_mailbox(db_url)
    queue_due(db_url)
    errors = []
    for _ in range(3):  # three scheduled runs of outreach_send
        try:
            send_batch(db_url, 1, 50, smtp_connector, settings, worker="atk")
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {exc}")
    state = rows(db_url, "SELECT l.email, e.status::text AS s, e.failure_kind, e.attempts"
                         " FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id ORDER BY e.id")
    assert not errors and {r["email"]: r["s"] for r in state}["a3@ex.example"] == "sent", (errors, state)


# ---------------------------------------------------------------------------------------------
# F4: a live sender slower than the reaper threshold (settings accepted as valid) still hands off
#     rows the reaper took; an operator who follows "check Sent Items" requeues it; it goes out twice
# ---------------------------------------------------------------------------------------------

class _SlowReplies:
    """Answers MAIL, RCPT and the end of DATA each after `delay` s (inside the client timeout)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.accepted: list[email.message.Message] = []

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        await asyncio.sleep(self.delay)
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        await asyncio.sleep(self.delay)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        await asyncio.sleep(self.delay)
        msg = email.message_from_bytes(envelope.content, policy=email.policy.compat32)
        msg["X-RcptTo"] = envelope.rcpt_tos[0]
        self.accepted.append(msg)
        return "250 2.0.0 OK queued"


def test_sender_never_hands_off_a_row_the_reaper_took_meanwhile(db_url, sink, settings, tmp_path):
    """The claim is taken, then (before the handoff) the reaper takes the rows back — never
    handed over, so straight back to the queue: the original sender must not send them; the next
    run sends each once."""
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"h{i}@ex.example,H,Heart" for i in range(5)]))
    one_mailbox(db_url)
    queue_due(db_url)
    taken: list[int] = []
    import outreach.send as send_mod

    real_check = send_mod.is_suppressed

    def stalled_sender(conn, address, *args):
        # The sender stalls after its claim, before its first handoff (a GC pause, a slow DNS
        # lookup…): meanwhile the reaper takes the rows back to the queue.
        if not taken:
            later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=31)
            reaped = reap(db_url, settings.reaper_threshold, now=later)
            assert reaped.unconfirmed == []
            taken.extend(reaped.requeued)
        return real_check(conn, address, *args)

    send_mod.is_suppressed = stalled_sender
    try:
        first = send_batch(db_url, 1, 10, smtp_connector, settings, worker="slow")
    finally:
        send_mod.is_suppressed = real_check
    assert len(taken) == 5 and first.claimed == 5
    assert (first.sent, first.lost_claims) == (0, 5) and sink.messages() == []
    second = send_batch(db_url, 1, 10, smtp_connector, settings, worker="next-run")
    assert second.sent == 5
    invariants.assert_ok(db_url, sink.messages())


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


# ---------------------------------------------------------------------------------------------
# F6: an unparseable reply to the end of DATA is classified RETRY (smtplib code -1), so a message
#     the server may have accepted is sent again 30 minutes later
# ---------------------------------------------------------------------------------------------

class _GarbledAfterData:
    def __init__(self) -> None:
        self.accepted: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.compat32)
        msg["X-RcptTo"] = envelope.rcpt_tos[0]
        self.accepted.append(msg)
        return "Ok: queued as 4ZxK2b1qzz" if len(self.accepted) == 1 else "250 OK"


def test_unparseable_reply_after_end_of_data_is_not_retried(db_url, settings, tmp_path, monkeypatch):
    handler = _GarbledAfterData()
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    with LoopbackSMTPServer(handler) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=5))
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["g@ex.example,G,Garbled"]), now=t0)
        queue_due(db_url, now=t0)
        for now in (t0, t0 + dt.timedelta(minutes=31)):
            for mb in (1, 2):
                send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk", now=now)
    st = rows(db_url, "SELECT status::text AS s, failure_kind, last_error FROM outreach.emails")
    t = invariants.check(db_url, handler.accepted)
    assert not t.problems, (st, t.problems)


# ---------------------------------------------------------------------------------------------
# Held: the daily cap under 12 concurrent claimers (expected to pass)
# ---------------------------------------------------------------------------------------------

def test_daily_cap_holds_under_concurrent_claims(db_url, tmp_path):
    from outreach import db
    from outreach.send import claim

    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"cap{i}@ex.example,C,Cap" for i in range(300)]))
    one_mailbox(db_url)
    with psycopg.connect(db_url) as c:
        c.execute("UPDATE outreach.mailboxes SET daily_cap = 37")
    queue_due(db_url)
    barrier = threading.Barrier(12)
    got: list[int] = []

    def worker() -> None:
        conn = db.connect(db_url, autocommit=True)
        barrier.wait()
        for _ in range(10):
            got.append(len(claim(conn, 1, 3, worker="cap")[0]))
        conn.close()

    ts = [threading.Thread(target=worker) for _ in range(12)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert sum(got) == 37


# ---------------------------------------------------------------------------------------------
# F7: a typo in a step's subject passes campaign validation; every due email of the step then
#     fails permanently ('render'), and fixing the file never brings them back
# ---------------------------------------------------------------------------------------------

def test_subject_typo_is_refused_or_recoverable(db_url, sink, settings, tmp_path):
    text = CAMPAIGN.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace('"{{ lead.company }} and late deliveries"', '"{{ lead.compnay }} and late deliveries"'))
    good = tmp_path / "good.yaml"
    good.write_text(text)
    leads = leads_csv(tmp_path, [f"t{i}@ex.example,T,Typo" for i in range(4)])
    try:
        import_leads(db_url, bad, MAILBOXES, leads)
    except Exception:  # noqa: BLE001 - refusing the file is a fine outcome
        return
    queue_due(db_url)
    for mb in (1, 2):
        send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk")
    # the operator fixes the campaign file and re-runs everything
    import_leads(db_url, good, MAILBOXES, leads)
    queue_due(db_url)
    for mb in (1, 2):
        send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk")
    st = rows(db_url, "SELECT status::text AS s, failure_kind, last_error FROM outreach.emails")
    assert len(sink.messages()) == 4, st


# ---------------------------------------------------------------------------------------------
# Held (expected to pass): external SIGKILL/SIGTERM at random moments of two concurrent
# `outreach send --until-empty` processes, with queue-due running alongside
# ---------------------------------------------------------------------------------------------

def test_random_external_kills_never_duplicate_or_lose(db_url, tmp_path):
    import random

    rng = random.Random(int(os.environ.get("ATK_SEED", "7")))
    n = 240
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"k{i}@ex.example,K,Kill" for i in range(n)]))
    with psycopg.connect(db_url) as c:
        c.execute("UPDATE outreach.mailboxes SET daily_cap = 100000, warmup_start = NULL")
    with FaultSMTPServer() as smtp:
        env = dict(os.environ, OUTREACH_DATABASE_URL=db_url, OUTREACH_HOME=str(ROOT),
                   AIRFLOW_HOME=str(tmp_path / "af"), OUTREACH_PUBLIC_URL="https://unsubscribe.test.example",
                   OUTREACH_UNSUBSCRIBE_SECRET="test-secret-0123456789")
        for conn_id in SMTP_CONN_IDS:
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = smtp.connection_json(timeout=5)
        env.pop("OUTREACH_FAILPOINTS", None)
        cmd = [sys.executable, "-m", "outreach.cli"]
        for i in range(8):
            procs = [subprocess.Popen(cmd + ["send", "--until-empty", "--limit", "5"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
            q = subprocess.Popen(cmd + ["queue-due"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(1.5, 4.0))
            procs[0].send_signal(signal.SIGKILL)
            time.sleep(rng.uniform(0, 0.5))
            procs[1].send_signal(signal.SIGTERM)
            for p in procs + [q]:
                p.wait(timeout=120)
            reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=31))
        subprocess.run(cmd + ["queue-due"], env=env, check=True, capture_output=True)
        p = subprocess.run(cmd + ["send", "--until-empty", "--limit", "50"], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        messages = smtp.messages()
    t = invariants.assert_ok(db_url, messages)
    assert t.sent_rows + t.unconfirmed == n, t
    print(f"\nkills: accepted={t.accepted} sent={t.sent_rows} unconfirmed={t.unconfirmed}")


@pytest.mark.parametrize("message_class", ["marketing", "transactional"])
def test_a_claim_never_takes_more_than_its_limit_whatever_the_plan(db_url, message_class):
    """CI failure of 2026-11-30 (one send run sent 196 rows where its plan allowed 100): written
    as ``e.id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)``, the claim's locking subquery could
    run as a subplan rescanned per row; each rescan skipped the rows the statement had already
    updated and returned the next n, so one claim took a mailbox's whole queue (daily cap and
    batch size ignored). It happened while the tables had no statistics (right after an import,
    before autovacuum's ANALYZE). The locking SELECT now runs once, as its own statement in
    outreach.claim_emails_v1 (migration 0018; before it, a MATERIALIZED CTE)."""
    from outreach import db
    from outreach.campaign import sync_mailboxes
    from outreach.send import claim
    from outreach.transactional import enqueue

    with psycopg.connect(db_url, autocommit=True) as c:
        for table in ("emails", "leads", "campaigns", "mailboxes", "enrollments"):
            c.execute(f"ALTER TABLE outreach.{table} SET (autovacuum_enabled = false)")
    if message_class == "marketing":
        from support.flow import import_demo

        import_demo(db_url)
        queue_due(db_url)
        mailbox = 1
    else:
        sync_mailboxes(db_url, MAILBOXES)
        with db.connect(db_url) as conn, conn.transaction():
            for i in range(60):
                enqueue(conn, f"k{i}", f"user{i}@example.com", "welcome",
                        {"user": {"name": "U"}, "verify_url": "https://app.example/v"})
        mailbox = scalar(db_url, "SELECT id FROM outreach.mailboxes WHERE transactional")
    with db.connect(db_url, autocommit=True) as conn:
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE")
            taken, _ = claim(conn, mailbox, 5, worker="t", message_class=message_class)
            assert len(taken) == 5, (analyzed, len(taken))


def test_queue_due_is_planned_without_a_nested_loop_over_the_table_it_fills(db_url):
    """Benchmark finding (issue 8): with statistics that say outreach.emails is empty (a fresh
    database, a first run after a big import), email_queue_due was planned as a nested-loop anti
    join scanning outreach.emails once per candidate while the statement filled it: quadratic
    (100,000 leads: 116 s). queue_due plans it with hash joins (email_planner_bulk_joins)."""
    from outreach import db
    from support.flow import import_demo

    import_demo(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("VACUUM ANALYZE")  # outreach.emails is analyzed empty
    with db.connect(db_url) as conn, conn.transaction():
        db.run(conn, "email_planner_bulk_joins")
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN " + db.query("email_queue_due"), {"now": None, "campaign_key": None}).fetchall())
    assert "Anti Join" in plan and "Nested Loop Anti Join" not in plan, plan
    assert queue_due(db_url) == {"queued": 196, "per_mailbox": {1: 98, 2: 98}, "held": []}
    assert queue_due(db_url) == {"queued": 0, "per_mailbox": {}, "held": []}
