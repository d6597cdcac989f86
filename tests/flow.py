"""Helpers that drive the real product functions (the same ones the DAGs and CLI call)."""

from __future__ import annotations

import datetime as dt

import psycopg
from psycopg.rows import dict_row

from conftest import CAMPAIGN, DNC, LEADS, MAILBOXES
from outreach.airflow_adapter import smtp_connector
from outreach.leads import import_leads
from outreach.queue import plan_batches
from outreach.send import send_batch
from outreach.suppression import import_suppressions


def import_demo(url: str, now: dt.datetime | None = None):
    """Import the shipped do-not-contact list and sample leads."""
    import_suppressions(url, DNC)
    return import_leads(url, CAMPAIGN, MAILBOXES, LEADS, now=now)


def send_all(url: str, settings, *, now: dt.datetime | None = None, worker: str = "test") -> list:
    """Run send batches until a plan is empty; return the batch summaries."""
    out = []
    for _ in range(100):
        batches = plan_batches(url, settings.batch_size, now=now)
        if not batches:
            return out
        for b in batches:
            out.append(send_batch(url, b["mailbox_id"], b["limit"], smtp_connector, settings,
                                  worker=worker, now=now))
    raise AssertionError("send_all did not converge")


def scalar(url: str, sql: str, params: tuple = ()):
    """Return the first column of the first row."""
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchone()[0]


def rows(url: str, sql: str, params: tuple = ()) -> list[dict]:
    """Return all rows as dicts."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()
