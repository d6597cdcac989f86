"""The thin layer between Airflow and the domain package: connections, settings, task bodies.

DAG files call these functions and nothing else. Nothing here runs at import time: DAG parsing
never touches the database or the network. The outreach database is reached through the Airflow
connection ``outreach_db`` when it exists, else ``OUTREACH_DATABASE_URL``, else the embedded
server; each mailbox's SMTP server through the Airflow connection named in the mailbox file, opened
with the SMTP provider's hook; Google Postmaster Tools through the service account in the Airflow
connection ``outreach_postmaster``.
"""

from __future__ import annotations

import smtplib
from typing import Any

from outreach.logutil import log

DB_CONN_ID = "outreach_db"
POSTMASTER_CONN_ID = "outreach_postmaster"


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


def postmaster_credentials(conn_id: str = POSTMASTER_CONN_ID) -> Any:
    """Return google-auth service-account credentials for the Postmaster Tools API.

    The Airflow connection (any conn type; ``google_cloud_platform`` works) holds the service
    account's JSON key in its extra ``keyfile_dict`` (a JSON object or its text; the Google
    provider's ``extra__google_cloud_platform__keyfile_dict`` is read too) or a file path in
    ``key_path``. The scope is ``postmaster.traffic.readonly``; the service account must be added
    as a user of each domain in Postmaster Tools. The key is never logged.

    :raises outreach.postmaster.PostmasterError: the connection is missing or holds no usable key.
    """
    import json

    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from google.oauth2 import service_account

    from outreach.postmaster import SCOPE, PostmasterError

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        raise PostmasterError(f"Airflow connection {conn_id!r} is not defined (it holds the "
                              "Postmaster service account key)") from None
    info = extra.get("keyfile_dict") or extra.get("extra__google_cloud_platform__keyfile_dict")
    try:
        if isinstance(info, str):
            info = json.loads(info)
        if info:
            return service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
        if extra.get("key_path"):
            return service_account.Credentials.from_service_account_file(extra["key_path"],
                                                                         scopes=[SCOPE])
    except (ValueError, KeyError, OSError) as exc:
        # The message of a key-parsing error names the problem, never the key's content.
        raise PostmasterError(f"connection {conn_id!r}: unusable service account key "
                              f"({type(exc).__name__})") from None
    raise PostmasterError(f"connection {conn_id!r} has neither extra keyfile_dict nor key_path")


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


def pause_task(mailbox: str, reason: str, by: str) -> dict[str, Any]:
    """Pause a mailbox (id or address) for an operator; return what changed."""
    from outreach.mailboxes import pause_mailbox

    change = pause_mailbox(database_url(), mailbox, reason, by)  # logs the change
    return {"mailbox_id": change.mailbox_id, "changed": change.changed, "status": change.status}


def resume_task(mailbox: str, by: str, why: str) -> dict[str, Any]:
    """Resume a mailbox (id or address) for an operator; return what changed."""
    from outreach.mailboxes import resume_mailbox

    change = resume_mailbox(database_url(), mailbox, by, why)  # logs the change
    return {"mailbox_id": change.mailbox_id, "changed": change.changed, "status": change.status}


def postmaster_fetch_task() -> dict[str, Any]:
    """Fetch and store the Postmaster Tools figures and compliance of every sending domain."""
    from outreach.health import HealthSettings
    from outreach.postmaster import PostmasterClient, fetch_and_store

    health = HealthSettings.from_env()
    client = PostmasterClient(postmaster_credentials(), base_url=health.postmaster_base_url)
    return fetch_and_store(database_url(), client, days=health.postmaster_days).to_dict()


def spam_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose latest known Postmaster spam rate is above the threshold."""
    from outreach.health import HealthSettings, pause_on_spam_rate

    health = HealthSettings.from_env()
    return [v.to_dict() for v in pause_on_spam_rate(database_url(),
                                                    threshold=health.spam_rate_threshold)]


def bounce_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose hard-bounce rate is above the threshold."""
    from outreach.health import HealthSettings, pause_on_bounce_rate

    health = HealthSettings.from_env()
    return [v.to_dict() for v in pause_on_bounce_rate(
        database_url(), threshold=health.bounce_rate_threshold, min_sends=health.bounce_min_sends,
        window_days=health.bounce_window_days)]


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
