"""Helpers that drive the real product functions (the same ones the DAGs and CLI call)."""

from __future__ import annotations

import datetime as dt

import psycopg
from psycopg.rows import dict_row

from conftest import CAMPAIGN, DNC, LEADS, MAILBOXES
from outreach.airflow_adapter import smtp_connector
from outreach.leads import import_leads
from outreach.queue import plan_batches
from outreach.send import send_planned
from outreach.suppression import import_suppressions


def import_demo(url: str, now: dt.datetime | None = None):
    """Import the shipped do-not-contact list and sample leads."""
    import_suppressions(url, DNC)
    return import_leads(url, CAMPAIGN, MAILBOXES, LEADS, now=now)


def send_run(url: str, settings, *, now: dt.datetime | None = None, worker: str = "test") -> list:
    """One send run as the DAG does it: plan, then send every planned batch; return the
    planned batches' summaries."""
    return [send_planned(url, b["quotas"], smtp_connector, settings, label=b["label"],
                         worker=worker, now=now)
            for b in plan_batches(url, settings.batch_size, parallelism=settings.send_parallelism,
                                  interval=settings.send_interval, now=now)]


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
