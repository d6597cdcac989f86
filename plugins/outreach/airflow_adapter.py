"""The thin layer between Airflow and the domain package: connections, settings, task bodies.

DAG files call these functions and nothing else. Nothing here runs at import time: DAG parsing
never touches the database or the network. The outreach database is reached through the Airflow
connection ``outreach_db`` when it exists, else ``OUTREACH_DATABASE_URL``, else the embedded
server; each mailbox's SMTP server through the Airflow connection named in the mailbox file, opened
with the SMTP provider's hook.
"""

from __future__ import annotations

import smtplib
from typing import Any

from outreach.logutil import log

DB_CONN_ID = "outreach_db"


def database_url(conn_id: str = DB_CONN_ID) -> str:
    """Return the outreach database URL (see the module docstring for the order)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        from outreach.embedded import database_url as fallback

        return fallback()
    uri = conn.get_uri()
    return "postgresql://" + uri.split("://", 1)[1] if "://" in uri else uri


def smtp_connector(smtp_conn_id: str) -> smtplib.SMTP:
    """Open a connected, authenticated SMTP client for an Airflow SMTP connection.

    Uses the SMTP provider's hook for the connection (host, port, implicit SSL / STARTTLS, login,
    OAuth2, timeout). The hook's own ``send_email_smtp`` is not used: it retries the whole send on
    any error, which duplicates mail, and builds messages without Message-ID or DKIM.

    :raises Exception: whatever the hook raises when it cannot connect (the transport classifies
        it as not accepted at stage CONNECT).
    """
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    hook = SmtpHook(smtp_conn_id=smtp_conn_id)
    hook.get_conn()
    client = hook._smtp_client  # the connected smtplib client the hook built (providers-smtp 3.2)
    if client is None:
        raise smtplib.SMTPConnectError(-1, f"SMTP hook for {smtp_conn_id!r} gave no client")
    return client


# --- task bodies -------------------------------------------------------------------------------

def import_task(campaign_file: str, mailbox_file: str, leads_file: str,
                suppressions_file: str | None) -> dict[str, Any]:
    """Import a do-not-contact list (optional) then a leads CSV; return the import summary."""
    from outreach.leads import import_leads
    from outreach.suppression import import_suppressions
    from outreach.paths import resolve

    url = database_url()
    out: dict[str, Any] = {}
    if suppressions_file:
        sup = import_suppressions(url, resolve(suppressions_file))
        log.info("suppressions %s: added=%s known=%s invalid=%s cancelled=%s", suppressions_file,
                 sup.added, sup.known, sup.invalid, sup.cancelled)
        for p in sup.problems:
            log.warning("%s, %s", suppressions_file, p)
        out["suppressions"] = {"added": sup.added, "known": sup.known, "invalid": sup.invalid}
    result = import_leads(url, campaign_file, mailbox_file, leads_file)
    log.info(result.summary())
    for p in result.problems:
        log.warning("%s, %s", leads_file, p)
    if result.suppressed_lines:
        log.info("%s: suppressed addresses on lines %s (not stored)", leads_file,
                 result.suppressed_lines)
    out["leads"] = result.to_dict()
    return out


def queue_task() -> dict[str, Any]:
    """Reap stale 'sending' rows, then queue every due sequence step."""
    from outreach.queue import queue_due, reap
    from outreach.settings import Settings

    url = database_url()
    reaped = reap(url, Settings.from_env().reaper_threshold)
    result = queue_due(url)
    result["reaped"] = len(reaped)
    return result


def plan_task() -> list[dict[str, Any]]:
    """Reap stale rows, then plan this run's batches (one mapped send task each)."""
    from outreach.queue import plan_batches, reap
    from outreach.settings import Settings

    settings = Settings.from_env()
    url = database_url()
    reap(url, settings.reaper_threshold)
    batches = plan_batches(url, settings.batch_size, parallelism=settings.send_parallelism,
                           interval=settings.send_interval)
    log.info("plan: %s batch(es): %s", len(batches), [b["label"] for b in batches])
    return batches


def send_task(batch: dict[str, Any], worker: str) -> dict[str, Any]:
    """Claim and send one planned batch across its mailboxes; return its summary."""
    from outreach.send import send_planned
    from outreach.settings import Settings

    summary = send_planned(database_url(), batch["quotas"], smtp_connector, Settings.from_env(),
                           label=batch["label"], worker=worker)
    return summary.to_dict()


def summary_task(results: list[dict[str, Any]] | None) -> dict[str, int]:
    """Add up the batch summaries of a run and log one line."""
    keys = ("claimed", "sent", "retried", "failed", "unconfirmed", "suppressed")
    total = {k: 0 for k in keys}
    for r in results or []:
        if r:
            for k in keys:
                total[k] += r.get(k, 0)
    log.info("run summary: batches=%s %s", len(list(results or [])),
             " ".join(f"{k}={v}" for k, v in total.items()))
    return total
