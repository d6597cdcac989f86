"""Helpers that drive the real product functions (the same ones the DAGs and CLI call)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from outreach.airflow.connections import smtp_connector
from outreach.leads import import_leads
from outreach.send import send_run as domain_send_run
from outreach.suppression import import_suppressions
from support import clifork
from support.paths import CAMPAIGN, DNC, LEADS, MAILBOXES, ROOT, SMTP_CONN_IDS

EXPECTED_LEADS = 196  # 214 rows − 5 invalid − 2 duplicates − 11 suppressed (see the sample files)


def import_demo(url: str, now: dt.datetime | None = None):
    """Import the shipped do-not-contact list and sample leads."""
    import_suppressions(url, DNC)
    return import_leads(url, CAMPAIGN, MAILBOXES, LEADS, now=now)


def send_run(url: str, settings, *, now: dt.datetime | None = None, worker: str = "test") -> list:
    """One send run as the DAG does it (:func:`outreach.send.send_run`: reap, plan, then send
    every planned batch); return the planned batches' summaries."""
    return domain_send_run(url, smtp_connector, settings, worker=worker, now=now).batches


def send_all(url: str, settings, *, now: dt.datetime | None = None, worker: str = "test") -> list:
    """Run send runs until a plan is empty; return the planned batches' summaries."""
    out = []
    for _ in range(100):
        summaries = send_run(url, settings, now=now, worker=worker)
        if not summaries:
            return out
        out.extend(summaries)
    raise AssertionError("send_all did not converge")


def scalar(url: str, sql: str, params: tuple = ()):
    """Return the first column of the first row."""
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchone()[0]


def rows(url: str, sql: str, params: tuple = ()) -> list[dict]:
    """Return all rows as dicts."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def leads_csv(tmp_path: Path, lines: list[str], name: str = "leads.csv") -> Path:
    """Write a leads CSV (header ``Email,First Name,Company``) from ``lines``; a line may be just
    an address (name and company are then filled in)."""
    p = tmp_path / name
    body = "".join((line if "," in line else f"{line},Pat,Test Ltd") + "\n" for line in lines)
    p.write_text("Email,First Name,Company\n" + body, encoding="utf-8")
    return p


def point_mailboxes_at(monkeypatch, connection_json: str) -> None:
    """Point every demo mailbox's Airflow SMTP connection at one server."""
    for conn_id in SMTP_CONN_IDS:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection_json)


def one_mailbox(url: str) -> None:
    """Every enrolment on mailbox 1, and no cap or warm-up in the way."""
    with psycopg.connect(url) as c:
        c.execute("UPDATE outreach.enrollments SET mailbox_id = 1")
        c.execute("UPDATE outreach.mailboxes SET daily_cap = 100000, warmup_start = NULL")


def cli_env(db_url: str, smtp, **extra: str) -> dict[str, str]:
    """The environment of an ``outreach`` CLI subprocess: this database, the project, a test
    unsubscribe URL and secret, no pacing and no gap (these tests drain the queue), every demo mailbox's SMTP
    connection at ``smtp`` (5 s timeout), no failpoint unless ``extra`` sets one; the worker's
    ``AIRFLOW_HOME`` (tests/conftest.py), so :func:`support.clifork.run` can fork it."""
    env = dict(os.environ)
    env.update({"OUTREACH_DATABASE_URL": db_url, "OUTREACH_HOME": str(ROOT),
                "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
                "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0"})
    for conn_id in SMTP_CONN_IDS:
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = smtp.connection_json(timeout=5)
    env.pop("OUTREACH_FAILPOINTS", None)
    env.update(extra)
    return env


def outreach_cmd(*args: str) -> list[str]:
    """The command line of ``outreach ARGS`` run with this interpreter."""
    return [sys.executable, "-m", "outreach.cli", *args]


def hand_over(url: str, claimed: list[dict], now: dt.datetime | None = None) -> None:
    """Stamp the handoff of claimed rows, as the sender does right before MAIL FROM
    (``email_touch_claim``): the reaper then fails them as unconfirmed instead of requeueing."""
    from outreach import db

    with db.connect(url, autocommit=True) as conn:
        for r in claimed:
            assert db.run(conn, "email_touch_claim", {"email_id": r["id"],
                                                      "claim_token": r["claim_token"], "now": now,
                                                      "address": r["email"]})


def leave_unconfirmed(url: str, n: int) -> list[int]:
    """Claim ``n`` due rows of mailbox 1 as a sender that vanished during their handoffs (stamped,
    never recorded), then reap as 31 minutes later: the rows are unconfirmed. Return their ids,
    sorted."""
    import datetime as dt

    from outreach import db
    from outreach.claim import claim
    from outreach.queue import reap

    with db.connect(url, autocommit=True) as conn:
        claimed = claim(conn, 1, n, worker="lost-worker")[0]
    hand_over(url, claimed)
    held = sorted(r["id"] for r in claimed)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31)
    assert sorted(reap(url, dt.timedelta(minutes=30), now=later).unconfirmed) == held
    return held


def outreach(db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``outreach ARGS`` (:func:`support.clifork.run`: a process forked from a warm
    interpreter) on DB_URL with the test settings and ``env``; the completed process, output
    captured as text, 300 s timeout."""
    e = dict(os.environ, OUTREACH_DATABASE_URL=db_url, OUTREACH_HOME=str(ROOT),
             OUTREACH_PUBLIC_URL="https://unsubscribe.test.example",
             OUTREACH_UNSUBSCRIBE_SECRET="test-secret-0123456789", OUTREACH_SEND_INTERVAL_MINUTES="0",
             OUTREACH_SEND_GAP_SECONDS="0",
             **env)
    return clifork.run(args, env=e, timeout=300)
