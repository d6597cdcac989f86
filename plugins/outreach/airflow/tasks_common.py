"""Task bodies more than one DAG family runs: the settings and database check, and the event
Assets' announcement. DAG files call the ``tasks_*`` modules, :mod:`outreach.airflow.defaults`
and :mod:`outreach.airflow.alerts` only; nothing here runs at import time."""

from __future__ import annotations

from typing import Any

from outreach.airflow.connections import (
    database_url,
)
from outreach.logutil import log


def config_check_task(*, marketing: bool = False) -> None:
    """Check every setting and the outreach database before a DAG's work (each DAG's own tasks check
    the connections they use).

    :param marketing: the unsubscribe URL and secret are required too (the send DAG).
    :raises airflow.sdk.exceptions.AirflowFailException: all problems in one line, no retry."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.airflow.configcheck import ConfigReport, check_database, check_settings

    report = ConfigReport()
    check_settings(report, marketing=marketing)
    check_database(report, database_url)  # the tasks' database: never an embedded one
    if not report.ok:
        for problem in report.problems:
            log.error("config: %s", problem)
        raise AirflowFailException(report.one_line())
    log.info(report.summary())


def announce_events_task(announcer: str, outlet_events: Any) -> dict[str, dict[str, Any]]:
    """Update the event Assets of ``announcer``'s families that have new events, the id range in each
    extra (:func:`outreach.eventassets.collect`); return the extras by family.

    :param announcer: ``inbox`` or ``send`` (:data:`outreach.eventassets.ANNOUNCERS`).
    :param outlet_events: the task context's ``outlet_events``.
    :raises Exception: what :func:`outreach.eventassets.collect` raises (the database failed
        before any event was read; the retry announces the same)."""
    from airflow.sdk import Asset

    from outreach.airflow.defaults import events_alias
    from outreach.eventassets import ANNOUNCERS, asset_uri, collect

    ranges = collect(database_url(), announcer)
    for family, extra in ranges.items():
        outlet_events[events_alias(announcer)].add(Asset(asset_uri(family)), extra=extra)
        log.info("Asset %s updated: %s new event(s), ids %s..%s", asset_uri(family),
                 extra["count"], extra["first_id"], extra["last_id"])
    if not ranges:
        log.info("no new events of %s: no asset event",
                 ", ".join(asset_uri(f) for f in ANNOUNCERS[announcer]))
    return ranges
