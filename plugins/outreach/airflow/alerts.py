"""Operator alerts from Airflow: the notifier (:func:`alert_notifier`), one alert per event key
(:func:`alert`, over :mod:`outreach.alerts`), the send tasks' ``on_failure_callback``
(:class:`RunFailedNotifier`) and the alerts of the preflight, automatic pauses and bounce
warnings.
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.connections import _connection, database_url
from outreach.logutil import log


def mailbox_names(url: str | None = None) -> dict[int, str]:
    """Return ``{mailbox id: name}`` for logs and task labels (:func:`outreach.logutil.mailbox_name`:
    the label from the mailbox file, never the full address)."""
    from outreach import db
    from outreach.logutil import mailbox_name
    from outreach.store import mailboxes as mailboxes_store

    with db.connect(url or database_url(), autocommit=True) as conn:
        return {r.id: mailbox_name(r.label, r.display_name, r.address)
                for r in mailboxes_store.mailbox_names(conn)}


ALERT_CONN_ID = "outreach_alerts"


def alert_notifier() -> Any:
    """Return the notifier alerts go through, or ``None`` when none is configured.

    ``OUTREACH_ALERT_NOTIFIER`` (any Airflow notifier, with ``OUTREACH_ALERT_NOTIFIER_KWARGS``), else
    with ``OUTREACH_ALERT_TO`` the SMTP provider's ``SmtpNotifier`` through
    ``OUTREACH_ALERT_SMTP_CONN_ID`` (give it ``retry_limit: 0``: the hook retries a whole send), from
    ``OUTREACH_ALERT_FROM``. docs/reference/configuration.md.

    :raises outreach.settings.SettingsError: ``OUTREACH_ALERT_NOTIFIER`` cannot be loaded."""
    import importlib
    import socket

    from outreach.settings import AlertSettings, SettingsError

    config = AlertSettings()
    if config.alert_notifier:
        module, _, name = config.alert_notifier.partition(":")
        try:
            return getattr(importlib.import_module(module), name)(**config.alert_notifier_kwargs)
        except (ImportError, AttributeError, ValueError, TypeError) as exc:
            raise SettingsError(f"OUTREACH_ALERT_NOTIFIER={config.alert_notifier!r} (with "
                                f"OUTREACH_ALERT_NOTIFIER_KWARGS) cannot be built: {exc}") from None
    to = list(config.alert_to)
    if not to:
        return None
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    conn_id = config.alert_smtp_conn_id
    conn = _connection(conn_id)
    sender = (config.alert_from
              or (conn.extra_dejson.get("from_email") if conn is not None else None)
              or f"outreach-alerts@{socket.getfqdn()}")
    return SmtpNotifier(to=to, from_email=sender, smtp_conn_id=conn_id,
                        subject="{{ outreach_alert.subject }}",
                        html_content="{{ outreach_alert.html }}")


def deliver_alert(subject: str, body: str) -> bool:
    """Send one alert through :func:`alert_notifier` (a log line only when none is configured).

    The body is sent as escaped HTML (lead data never becomes markup or a header).

    :returns: whether it was handed to a notifier.
    :raises Exception: whatever the notifier raises (the alert's claim is rolled back)."""
    import html

    notifier = alert_notifier()
    if notifier is None:
        log.warning("alert recorded, not delivered (no notifier: set OUTREACH_ALERT_TO or "
                    "OUTREACH_ALERT_NOTIFIER): %s", subject)
        return False
    subject = " ".join(subject.split())
    notifier({"outreach_alert": {"subject": subject, "body": body,
                                 "html": f"<pre>{html.escape(body)}</pre>"}})
    return True


def alert(kind: str, keys: str | list[str], compose, url: str | None = None) -> list[str]:
    """Raise an alert once per event key (see :mod:`outreach.alerts`); return the new keys.

    An alert that cannot be delivered is logged and left unclaimed (the next run tries again);
    it never fails the task that noticed the event.
    """
    from outreach.alerts import raise_alert

    try:
        return raise_alert(url or database_url(), kind, keys, compose, deliver_alert)
    except Exception as exc:  # noqa: BLE001 - an alert must not turn a task's outcome around
        log.error("alert %s could not be delivered (it is tried again next time): %s: %s", kind,
                  type(exc).__name__, exc)
        return []


def _utc_day() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")


class RunFailedNotifier:
    """``on_failure_callback`` and ``on_retry_callback`` of the send tasks: one alert per failed DAG run
    (key ``run-failed:<dag id>:<run id>``), raised at the first failed try, not after the retries'
    delays (2 retries × 300 s took 11.5 minutes).

    :param retrying: this instance is the ``on_retry_callback``."""

    def __init__(self, retrying: bool = False) -> None:
        self.retrying = retrying

    def __call__(self, context: dict[str, Any]) -> None:
        """Alert about the failed task of ``context``, unless its DAG run has had its alert."""
        ti = context["ti"]
        error = context.get("exception")
        label = context.get("batch_label") or f"{ti.task_id}[{ti.map_index}]"
        key = f"run-failed:{ti.dag_id}:{ti.run_id}"
        if self.retrying:
            delay = getattr(context.get("task"), "retry_delay", None)
            seconds = int(delay.total_seconds()) if delay is not None else None
            then = (f"Airflow retries it in {seconds} s (try {ti.try_number} of "
                    f"{getattr(ti, 'max_tries', 0) + 1}); if every try fails the task turns red.")
            what = f"outreach: {ti.dag_id} task failed, retrying ({label})"
        else:
            then = "Clearing the failed task is safe: it claims fresh rows or none."
            what = f"outreach: {ti.dag_id} run failed ({label})"

        def compose(_new: list[str]) -> tuple[str, str]:
            return (what, f"DAG {ti.dag_id}, run {ti.run_id}: task {ti.task_id}[{ti.map_index}] "
                          f"({label}) failed.\n\n{error}\n\n{then}")

        alert("run_failed", key, compose)


def refused_logins(conn_ids: list[str], exc: BaseException) -> None:
    """When a login of ``conn_ids`` was refused (:class:`outreach.oauth.LoginRefused`), alert once per
    connection and UTC day and fail without retry (a retry cannot fix credentials); else return.

    :raises airflow.sdk.exceptions.AirflowFailException: with ``exc``'s one line."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach import oauth

    refused = oauth.take_refusals(conn_ids)
    if not refused:
        return
    lines = {r.conn_id: str(r) for r in refused}

    def compose(new: list[str]) -> tuple[str, str]:
        names = [k.split(":")[1] for k in new]
        return (f"outreach: login refused for {', '.join(names)}",
                "Nothing was handed over and no attempt was counted; the mailbox sends (or its "
                "inbox is read) again once the login works (outreach mailbox check ADDRESS).\n\n"
                + "\n".join(lines[n] for n in names))

    alert("login_failed", [f"login-failed:{c}:{_utc_day()}" for c in lines], compose)
    raise AirflowFailException(str(exc)) from None


def alert_preflight(report: dict[str, Any]) -> None:
    """Alert once per UTC day per domain and set of failing checks (``preflight_task`` output)."""
    for domain, failed in sorted(report.get("failed", {}).items()):
        key = f"preflight:{domain}:{','.join(failed)}:{_utc_day()}"
        alert("preflight_fail", key, lambda _n, d=domain, f=failed: (
            f"outreach: DNS preflight FAIL for {d}: {', '.join(f)}",
            f"The DNS preflight of {d} failed: {', '.join(f)} (OUTREACH_PREFLIGHT="
            f"{report['mode']}: its mailboxes send {'nothing' if report['mode'] == 'block' else 'anyway'}).\n"
            f"Check it with: outreach preflight {d}"))


def alert_pauses(url: str) -> list[str]:
    """Alert once per automatic pause (``postmaster`` or ``bounce-rate``) of the last 7 days,
    with the figure and the rule (the pause's reason)."""
    from dataclasses import asdict

    from outreach import db
    from outreach.store import mailboxes as mailboxes_store

    with db.connect(url, autocommit=True) as conn:
        events = [asdict(e) for e in mailboxes_store.mailbox_auto_pauses(conn)]
    names = mailbox_names(url)
    sent = []
    for e in events:
        name = names.get(e["mailbox_id"], e["mailbox_id"])
        sent += alert("paused", f"paused:{e['id']}", lambda _n, e=e, name=name: (
            f"outreach: mailbox {name} paused by {e['actor']}",
            f"Mailbox {name} was paused automatically by the {e['actor']} rule at "
            f"{e['created_at']:%Y-%m-%d %H:%M} UTC:\n{e['reason']}\n\nIt sends nothing until an "
            "operator resumes it (outreach_mailbox_resume)."), url)
    return sent


def alert_bounce_warnings(url: str) -> list[str]:
    """Alert once per mailbox and UTC day when its hard-bounce rate is above the warning level
    (``OUTREACH_BOUNCE_WARN_RATE``) but not yet at the pause threshold."""
    from outreach.health import HealthSettings, bounce_warnings

    health = HealthSettings.from_env()
    names = mailbox_names(url)
    sent = []
    for w in bounce_warnings(url, warn_rate=health.bounce_warn_rate,
                             threshold=health.bounce_rate_threshold,
                             min_sends=health.bounce_min_sends,
                             window_days=health.bounce_window_days):
        name = names.get(w["mailbox_id"], w["mailbox_id"])
        sent += alert("bounce_warning", f"bounce-warning:{w['mailbox_id']}:{_utc_day()}",
                      lambda _n, w=w, name=name: (f"outreach: mailbox {name} bounce rate warning",
                                                  f"Mailbox {name}: {w['reason']}."), url)
    return sent
