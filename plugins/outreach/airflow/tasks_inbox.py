"""Task bodies of ``outreach_inbox`` (which inboxes, read each, the summary) and
``outreach_notify_replies`` (see :mod:`outreach.airflow.tasks_common` for what a task body may
do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.alerts import (
    refused_logins,
)
from outreach.airflow.connections import (
    database_url,
    imap_account,
    optional_unsubscribe_secret,
)
from outreach.airflow.tasks_common import config_check_task
from outreach.logutil import log


def inbox_targets_task() -> list[dict[str, Any]]:
    """Return the IMAP accounts to read this run (see :func:`outreach.inbox.plan_targets`)."""
    from outreach.inbox import plan_targets

    config_check_task()
    targets = plan_targets(database_url())
    log.info("inbox: %s account(s) to read: %s", len(targets), [t["label"] for t in targets])
    return targets


def inbox_read_task(target: dict[str, Any]) -> dict[str, Any]:
    """Read one account (see :func:`outreach.inbox.read_target`); return its summary.

    :raises outreach.inbox.InboxError: the mailbox could not be read; the one-line message names
        the mailbox, the connection and the IMAP stage, and the task fails (clearing it is safe).
    """
    from outreach.inbox import InboxError, read_target

    try:
        return read_target(database_url(), target, imap_account,
                           unsubscribe_secret=optional_unsubscribe_secret()).to_dict()
    except InboxError as exc:
        refused_logins([target["conn_id"]], exc)
        raise


def inbox_summary_task(results: list[dict[str, Any]] | None) -> dict[str, int]:
    """Add up the mailbox summaries of an inbox run and log one line."""
    from outreach.inbox import COUNTED

    total = {k: 0 for k in ("fetched", *COUNTED)}
    for r in results or []:
        if r:
            for k in total:
                total[k] += r.get(k, 0)
    log.info("inbox run: mailboxes=%s %s", len(list(results or [])),
             " ".join(f"{k}={v}" for k, v in total.items()))
    return total


def notify_replies_task() -> dict[str, int]:
    """Notify the new replies (:func:`outreach.notify.notify_replies`) through the alert notifier;
    return ``{"replies", "messages"}``.

    :raises airflow.sdk.exceptions.AirflowSkipException: no notifier configured (cursor unchanged).
    :raises outreach.settings.SettingsError: a notify setting is out of range, or no notifier builds.
    :raises Exception: the notifier failed; the retry delivers the batch again."""
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach.airflow.alerts import alert_notifier, deliver_alert
    from outreach.notify import notify_replies
    from outreach.settings import NotifySettings

    config = NotifySettings()
    if alert_notifier() is None:
        raise AirflowSkipException("no notifier: set OUTREACH_ALERT_TO (SMTP) or "
                                   "OUTREACH_ALERT_NOTIFIER (e.g. Slack's); replies wait")
    result = notify_replies(database_url(), deliver_alert, imap_account, config)
    log.info("reply notifications: %s repl(ies) in %s message(s)", result.replies, result.messages)
    return {"replies": result.replies, "messages": result.messages}
