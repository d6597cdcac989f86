"""What the DAG files share at parse time: ``@dag`` arguments, schedules, assets, the SMTP pool
and trigger-form choices. Files and settings only: DAG parsing never touches the database or the
network.
"""

from __future__ import annotations

from typing import Any

SMTP_POOL = "outreach_smtp"
"""The Airflow pool every task that opens SMTP sessions runs in (one slot = one session at a time):
its size bounds concurrent SMTP sessions across the whole deployment, whatever the number of
workers. The launchers and docker-compose.yaml's airflow-init create it
(``airflow pools set outreach_smtp N``; N is ``OUTREACH_SMTP_POOL_SLOTS``, default 4). A task in a
pool that does not exist is never scheduled (the scheduler logs "Tasks using non-existent pool")."""


SMTP_POOL_DESCRIPTION = "outreach: concurrent SMTP sessions of the send tasks"


def send_sessions_per_task() -> int:
    """The ``outreach_smtp`` pool slots one ``send_batch`` task holds: the SMTP sessions it runs
    at once, ``OUTREACH_SEND_SESSIONS_PER_TASK`` (1 to 64, default 1; the sizing rule sets it:
    docs/reference/sizing.md); when ``OUTREACH_SMTP_POOL_SLOTS`` is set, the largest number up
    to that which divides the pool (:func:`outreach.sizing.sessions_per_task`: Airflow never
    starts a task that needs more slots than its pool has, nor all of a run's tasks at once
    otherwise). Read at parse time for the DAG and at run time for the plan, so every Airflow
    process must have the same values; a value out of range or not a whole number reads as 1
    here and fails the run's plan with the settings error."""
    import os

    from outreach.sizing import sessions_per_task

    def whole(name: str, top: int) -> int | None:
        try:
            value = int(os.environ.get(name, "").strip())
        except ValueError:
            return None
        return value if 1 <= value <= top else None

    wanted = whole("OUTREACH_SEND_SESSIONS_PER_TASK", 64) or 1
    pool = whole("OUTREACH_SMTP_POOL_SLOTS", 100_000)
    return sessions_per_task(pool, wanted) if pool else wanted


ACCESS_CONTROL_WARNING = r"The airflow\.security\.permissions module is deprecated"
"""The start of the warning Airflow 3.3 gives for each DAG with ``access_control``
(``airflow.sdk.definitions.dag``), which :func:`dag_kwargs` silences."""


def dag_kwargs(*, schedule: Any = None, retries: int = 1, operator: bool = False,
               on_failure_callback: Any = None, on_retry_callback: Any = None,
               access: str = "operator", **extra: Any) -> dict[str, Any]:
    """Return the ``@dag`` arguments every outreach DAG shares.

    ``schedule`` (cron or ``None``), a fixed UTC start date, no catch-up, tag ``outreach`` (and
    ``operator``), owner ``outreach``, ``retries`` and the callbacks per task, ``access_control`` by
    ``access`` (``operator`` or ``admin``); ``extra`` passed through. ``OUTREACH_SCHEDULES=off``
    turns every schedule off (DAGs run only when triggered).

    :raises outreach.settings.SettingsError: ``OUTREACH_SCHEDULES`` is neither ``on`` nor ``off``.
    :raises ValueError: ``access`` is neither ``operator`` nor ``admin``."""
    import datetime as dt
    import warnings

    from airflow.sdk.exceptions import RemovedInAirflow4Warning

    from outreach.airflow.roles import access_control
    from outreach.settings import ScheduleSettings

    # Airflow 3 warns on every DAG that declares access_control (removed in Airflow 4); it is
    # still how the FAB auth manager grants DAG-level permissions (docs/howto/users-and-roles.md).
    # Called as the DAG file is imported, so the filter holds inside the DAG processor's
    # per-file warnings capture; any other Airflow 4 warning still shows.
    warnings.filterwarnings("ignore", message=ACCESS_CONTROL_WARNING,
                            category=RemovedInAirflow4Warning)

    switch = ScheduleSettings().schedules
    from airflow.configuration import conf

    # retry_delay is passed explicitly, as Airflow's own [core] default_task_retry_delay: a mapped
    # task (send_batch) serialises only the partial kwargs it was given and is read back with the
    # schema's 300 s, whatever that setting says (seen with Airflow 3.3.2).
    default_args: dict[str, Any] = {
        "owner": "outreach", "retries": retries,
        "retry_delay": dt.timedelta(seconds=conf.getint("core", "default_task_retry_delay",
                                                        fallback=300))}
    if on_failure_callback is not None:
        default_args["on_failure_callback"] = on_failure_callback
    if on_retry_callback is not None:
        default_args["on_retry_callback"] = on_retry_callback
    return {"schedule": schedule if switch == "on" else None, "start_date": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            "catchup": False, "tags": ["outreach"] + (["operator"] if operator else []),
            "default_args": default_args, "access_control": access_control(access), **extra}


def project_files(folder: str, pattern: str) -> list[str]:
    """Return project-relative paths under ``folder`` matching ``pattern`` (for Param examples)."""
    from outreach.paths import project_root

    root = project_root()
    return sorted(str(p.relative_to(root)) for p in (root / folder).glob(pattern))


def mailbox_addresses(mailbox_file: str = "include/mailboxes.yaml") -> list[str]:
    """Return the mailbox addresses of the mailbox file (``[]`` if it cannot be read)."""
    from outreach.campaign import ConfigError, load_mailboxes

    try:
        return [m.address.lower() for m in load_mailboxes(mailbox_file)]
    except ConfigError:
        return []


def transactional_schedule() -> str:
    """Return the ``outreach_transactional`` schedule: ``OUTREACH_TRANSACTIONAL_SCHEDULE`` (a cron
    expression), default ``* * * * *`` (every minute: the longest a row waits when nobody runs
    ``outreach transactional worker``).

    :raises outreach.settings.SettingsError: not a five-field cron expression.
    """
    from outreach.settings import ScheduleSettings

    return ScheduleSettings().transactional_schedule


SOURCES_SCHEDULE = "@hourly"
"""The schedule of ``outreach_import_sources``: campaigns whose source declares no other."""


def source_dags() -> list[dict[str, Any]]:
    """Return the import DAGs the campaign files ask for: ``[{"dag_id", "schedule", "campaigns"}]``.

    ``outreach_import_sources`` (hourly) holds the sources without a schedule of their own; another
    cron or an Asset URI gets ``outreach_import_source_<key>``. Reads files only.

    :raises outreach.campaign.ConfigError: a campaign file with a source is invalid."""
    from outreach.sources import source_campaigns

    main: dict[str, Any] = {"dag_id": "outreach_import_sources", "schedule": SOURCES_SCHEDULE,
                            "campaigns": []}
    out = [main]
    for path, c in source_campaigns():
        if c.schedule in (None, SOURCES_SCHEDULE):
            main["campaigns"].append((path, c.key))
        else:
            out.append({"dag_id": f"outreach_import_source_{c.key.replace('-', '_')}",
                        "schedule": c.schedule, "campaigns": [(path, c.key)]})
    return out


SUPPRESSION_SOURCES_SCHEDULE = "@hourly"
"""The schedule of ``outreach_import_suppression_sources`` (the do-not-contact sources)."""


def suppression_source_names() -> list[str]:
    """Return the names of the do-not-contact sources of the suppression sources file, for
    ``dags/outreach_import_suppression_sources.py`` (one task each). Files only (DAG parsing).

    :raises outreach.campaign.ConfigError: the file is invalid.
    """
    from outreach.airflow.suppression_sources import load_sources

    return [s.name for s in load_sources()]


def dag_schedule(schedule: str) -> Any:
    """Return ``schedule`` as ``@dag`` takes it: an Asset for an Asset URI, else the string."""
    from outreach.sources import is_asset_uri

    if is_asset_uri(schedule):
        from airflow.sdk import Asset

        return Asset(schedule)
    return schedule


def lead_assets() -> list[Any]:
    """Return the Asset of every campaign's leads (``outreach://leads/<key>``), from files only.

    Sourced campaigns and every other campaign file that loads; ``outreach_queue_due`` runs on them."""
    from airflow.sdk import Asset

    from outreach.campaign import ConfigError, load_campaign
    from outreach.paths import campaigns_dir
    from outreach.sources import lead_asset_uri, source_campaigns

    keys = [c.key for _, c in source_campaigns()]
    for path in sorted(campaigns_dir().glob("*.yaml")):
        try:
            key = load_campaign(path).key
        except ConfigError:
            continue
        if key not in keys:
            keys.append(key)
    return [Asset(lead_asset_uri(k)) for k in keys]


LEADS_ALIAS = "outreach_leads_imported"


def leads_alias() -> Any:
    """Return the AssetAlias through which a file import (``outreach_import_leads``) updates
    the leads Asset of the campaign it imported into, known only when it runs."""
    from airflow.sdk import AssetAlias

    return AssetAlias(LEADS_ALIAS)


def queue_due_schedule() -> Any:
    """Return ``outreach_queue_due``'s schedule: ``OUTREACH_QUEUE_DUE_SCHEDULE`` (default every 15
    minutes, UTC) or a leads Asset update (``AssetOrTimeSchedule``); the plain cron without campaigns.

    :raises outreach.settings.SettingsError: the cron is not a five-field expression."""
    from outreach.settings import ScheduleSettings

    cron = ScheduleSettings().queue_due_schedule
    assets = lead_assets()
    if not assets:
        return cron
    from airflow.sdk import AssetAny, AssetOrTimeSchedule, CronTriggerTimetable

    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"),
                               assets=AssetAny(*assets))


UNCONFIRMED_ASSET_NAME = "outreach_unconfirmed"


UNCONFIRMED_ASSET_URI = "outreach://unconfirmed"


REVIEW_OPTIONS = ("was sent", "not sent, requeue", "leave for later")


def unconfirmed_asset() -> Any:
    """Return the asset the send DAG updates when new unconfirmed emails appear; it schedules
    ``outreach_unconfirmed_review``."""
    from airflow.sdk import Asset

    return Asset(name=UNCONFIRMED_ASSET_NAME, uri=UNCONFIRMED_ASSET_URI)


UNCONFIRMED_ALIAS = "outreach_unconfirmed_flag"


def unconfirmed_alias() -> Any:
    """Return the AssetAlias through which the send DAG's ``after_send`` updates the
    unconfirmed asset (:func:`unconfirmed_asset`), only when a Required Action is needed: a
    plain Asset outlet would get an event on every success, and the task must succeed (not
    skip) for its event Assets' events. Airflow queues the DAGs scheduled on an asset for an
    event added through an alias like for any other (``AssetManager.register_asset_change``)."""
    from airflow.sdk import AssetAlias

    return AssetAlias(UNCONFIRMED_ALIAS)


APPROVAL_SCHEDULE = "*/5 * * * *"
"""How often ``outreach_campaign_approval`` looks for campaigns awaiting approval (UTC): a
submitted campaign gets its Required Action within five minutes, without a trigger."""


def approval_params() -> dict[str, Any]:
    """Return the ``decide`` task's form (HITL ``params``): the reason the responder types
    (recorded with either answer; a rejection's reason is what the campaign's owner reads)."""
    from airflow.sdk import Param

    return {"reason": Param("", type=["null", "string"], title="Reason",
                            description="Why (a rejection sends the campaign back to draft "
                                        "with this reason; recorded with an approval too)")}


def events_alias(announcer: str) -> Any:
    """Return the AssetAlias through which ``announcer``'s DAG (a key of
    :data:`outreach.eventassets.ANNOUNCERS`: ``inbox``, ``send``) updates the event Assets
    (``outreach://events/<family>``): only the families with new events get an asset event.
    Declared as the task's outlet; a plain Asset outlet would get an event on every success."""
    from airflow.sdk import AssetAlias

    return AssetAlias(f"outreach_events_{announcer}")


def events_asset(family: str) -> Any:
    """Return the Asset of an event family (``outreach://events/<family>``) for a DAG's
    ``schedule`` (``outreach_notify_replies``: ``events_asset("replies")``).

    :raises KeyError: unknown family (:data:`outreach.eventassets.FAMILIES`).
    """
    from airflow.sdk import Asset

    from outreach.eventassets import asset_uri

    return Asset(asset_uri(family))
