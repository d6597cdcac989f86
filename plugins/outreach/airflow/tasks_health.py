"""Task bodies of mailbox health: ``outreach_postmaster`` (Google Postmaster's spam rate) and the
bounce and complaint rates the inbox and postmaster DAGs check (see
:mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.alerts import (
    alert_bounce_warnings,
    alert_pauses,
)
from outreach.airflow.connections import (
    database_url,
    postmaster_credentials,
)


def postmaster_fetch_task() -> dict[str, Any]:
    """Fetch and store the Postmaster Tools figures and compliance of every sending domain."""
    from outreach.health import HealthSettings
    from outreach.postmaster import PostmasterClient, fetch_and_store

    health = HealthSettings.from_env()
    client = PostmasterClient(postmaster_credentials(), base_url=health.postmaster_base_url)
    return fetch_and_store(database_url(), client, days=health.postmaster_days).to_dict()


def spam_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose latest known Postmaster spam rate is above the threshold; alert
    once per automatic pause (:func:`alert_pauses`)."""
    from outreach.health import HealthSettings, pause_on_spam_rate

    health = HealthSettings.from_env()
    url = database_url()
    verdicts = [v.to_dict() for v in pause_on_spam_rate(url, threshold=health.spam_rate_threshold)]
    alert_pauses(url)
    return verdicts


def bounce_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose hard-bounce rate is above the threshold; alert once per automatic
    pause, and once a day per mailbox above the warning level (``OUTREACH_BOUNCE_WARN_RATE``)."""
    from outreach.health import HealthSettings, pause_on_bounce_rate

    health = HealthSettings.from_env()
    url = database_url()
    verdicts = [v.to_dict() for v in pause_on_bounce_rate(
        url, threshold=health.bounce_rate_threshold, min_sends=health.bounce_min_sends,
        window_days=health.bounce_window_days)]
    alert_pauses(url)
    alert_bounce_warnings(url)
    return verdicts


def complaint_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose feedback-loop complaint rate is above the threshold; alert once per
    automatic pause (:func:`alert_pauses`)."""
    from outreach.health import HealthSettings, pause_on_complaint_rate

    health = HealthSettings.from_env()
    url = database_url()
    verdicts = [v.to_dict() for v in pause_on_complaint_rate(
        url, threshold=health.complaint_rate_threshold,
        min_sends=health.bounce_min_sends, window_days=health.bounce_window_days)]
    alert_pauses(url)
    return verdicts
