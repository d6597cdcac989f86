"""Chaos: real `outreach send` processes, SIGKILLed at failpoints, many at once, killed (SIGKILL or
SIGTERM) at random moments while queue-due runs alongside, and a database restart in the middle
of a batch. The invariant checker runs after each scenario.

CI runs a bounded number of kill iterations (OUTREACH_CHAOS_ITERATIONS, default 10);
`make chaos N=…` runs as many as asked and prints the checker's totals.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import time
from pathlib import Path

import psycopg
import pytest

from outreach.airflow.connections import smtp_connector
from outreach.dev import embedded
from outreach.failpoints import POINTS
from outreach.leads import import_leads
from outreach.migrate import upgrade
from outreach.queue import queue_due, reap
from outreach.send import BatchAborted, send_batch
from support import clifork, invariants
from support.embeddedpg import embedded_server
from support.faultsmtp import FaultSMTPServer
from support.flow import cli_env, leads_csv, rows, scalar
from support.paths import CAMPAIGN, MAILBOXES, ROOT, SMTP_CONN_IDS

ITERATIONS = int(os.environ.get("OUTREACH_CHAOS_ITERATIONS", "10"))


def prepare(db_url: str, tmp_path: Path, n: int, tag: str) -> None:
    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, [f"{tag}{i}@chaos.example" for i in range(n)], name=f"{tag}.csv"))
    with psycopg.connect(db_url) as conn:  # established mailboxes: no cap gets in the way here
        conn.execute("UPDATE outreach.mailboxes SET daily_cap = 100000, warmup_start = NULL")
    assert queue_due(db_url)["queued"] == n


def test_eight_concurrent_send_processes_over_2000_rows(db_url, tmp_path):
    prepare(db_url, tmp_path, 2000, "c")
    with FaultSMTPServer() as smtp:
        env = cli_env(db_url, smtp, OUTREACH_BATCH_SIZE="25")
        procs = [clifork.start(("send", "--until-empty"), env=env, merge_stderr=True) for _ in range(8)]
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, "\n".join(o[-2000:] for o in outputs)
        messages = smtp.messages()
    totals = invariants.assert_ok(db_url, messages)
    assert len(messages) == totals.sent_rows == 2000
    claimers = {r["claimed_by"] for r in rows(db_url, "SELECT DISTINCT claimed_by FROM outreach.emails")}
    assert len(claimers) >= 4, claimers  # the processes really shared the work


def test_senders_sigkilled_at_failpoints_never_send_twice_or_lose_a_row(db_url, tmp_path):
    seed = int(os.environ.get("OUTREACH_CHAOS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    n_rows = max(300, ITERATIONS * 30)
    prepare(db_url, tmp_path, n_rows, "k")
    kills: dict[str, int] = {p: 0 for p in POINTS}
    with FaultSMTPServer() as smtp:
        for i in range(ITERATIONS):
            point = POINTS[i % len(POINTS)]
            nth = rng.randint(1, 4 if point.startswith(("claim", "after_claim")) else 8)
            env = cli_env(db_url, smtp, OUTREACH_FAILPOINTS=f"{point}:{nth}",
                          OUTREACH_BATCH_SIZE="10")
            proc = clifork.run(("send", "--until-empty"), env=env, timeout=300)
            assert proc.returncode in (0, -9), f"seed {seed}, {point}:{nth}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
            kills[point] += proc.returncode == -9
            # The reaper, 31 minutes later: whatever the killed sender held becomes unconfirmed.
            reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31))
            assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'sending'") == 0
        # A sender that is not killed finishes the rest.
        proc = clifork.run(("send", "--until-empty"), env=cli_env(db_url, smtp, OUTREACH_BATCH_SIZE="50"), timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        messages = smtp.messages()
    totals = invariants.assert_ok(db_url, messages)
    leftover = rows(db_url, "SELECT status::text AS s, failure_kind AS k, count(*) AS n"
                            " FROM outreach.emails GROUP BY 1, 2")
    assert {(r["s"], r["k"]) for r in leftover} <= {("sent", None), ("failed", "unconfirmed")}, leftover
    assert totals.sent_rows + totals.unconfirmed == n_rows  # nothing lost, nothing stuck
    print(f"\nchaos: seed={seed} iterations={ITERATIONS} kills={kills} accepted={totals.accepted} "
          f"sent={totals.sent_rows} unconfirmed={totals.unconfirmed} send_log={totals.send_log} "
          f"duplicates=0 lost=0")
    assert sum(kills.values()) >= ITERATIONS // 2  # the failpoints were really reached


@pytest.fixture
def own_server():
    """A PostgreSQL of this test's own, so that restarting it disturbs no other test."""
    with embedded_server("outreach-chaos-pg-") as (admin_url, restart):
        url = embedded.ensure_database(admin_url, "outreach")
        upgrade(url)
        yield url, restart


def test_postgres_restarted_mid_batch_loses_nothing_and_sends_nothing_twice(own_server, tmp_path, settings,
                                                                             monkeypatch):
    url, restart = own_server
    import_leads(url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, [f"pg{i}@chaos.example" for i in range(40)], name="pg.csv"))
    queue_due(url)
    with FaultSMTPServer(nth={5: "hook"}, on_message=lambda n: restart()) as smtp:
        for conn_id in SMTP_CONN_IDS:
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", smtp.connection_json(timeout=30))
        with pytest.raises(BatchAborted, match="database connection lost mid-batch"):
            send_batch(url, 1, 20, smtp_connector, settings, worker="restart-test")
        # The row handed off while the database restarted was recorded after reconnecting; the
        # rows never handed off went back to the queue; nothing is left 'sending'.
        assert scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'sending'") == 0
        assert scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'sent'") == 5
        assert scalar(url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued' AND attempts = 0") == 35
        # The next run carries on.
        for mailbox in (1, 2):
            while send_batch(url, mailbox, 20, smtp_connector, settings).claimed:
                pass
        messages = smtp.messages()
    totals = invariants.assert_ok(url, messages)
    assert len(messages) == totals.sent_rows == 40 and totals.unconfirmed == 0


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
        # The worker's AIRFLOW_HOME: the calls fork from its warm interpreter (support.clifork).
        env = dict(os.environ, OUTREACH_DATABASE_URL=db_url, OUTREACH_HOME=str(ROOT),
                   OUTREACH_PUBLIC_URL="https://unsubscribe.test.example",
                   OUTREACH_UNSUBSCRIBE_SECRET="test-secret-0123456789")
        for conn_id in SMTP_CONN_IDS:
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = smtp.connection_json(timeout=5)
        env.pop("OUTREACH_FAILPOINTS", None)
        for _ in range(8):  # batches of 5 rows: --limit now bounds the whole command
            procs = [clifork.start(("send", "--until-empty"), env={**env, "OUTREACH_BATCH_SIZE": "5"})
                     for _ in range(2)]
            q = clifork.start(("queue-due",), env=env)
            time.sleep(rng.uniform(1.5, 4.0))
            procs[0].send_signal(signal.SIGKILL)
            time.sleep(rng.uniform(0, 0.5))
            procs[1].send_signal(signal.SIGTERM)
            for p in procs + [q]:
                with p:
                    p.wait(timeout=120)
            reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31))
        assert clifork.run(("queue-due",), env=env).returncode == 0
        p = clifork.run(("send", "--until-empty"), env={**env, "OUTREACH_BATCH_SIZE": "50"}, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        messages = smtp.messages()
    t = invariants.assert_ok(db_url, messages)
    assert t.sent_rows + t.unconfirmed == n, t
    print(f"\nkills: accepted={t.accepted} sent={t.sent_rows} unconfirmed={t.unconfirmed}")
