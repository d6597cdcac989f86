"""Task bodies of the import DAGs: ``outreach_import_leads`` (a file), ``outreach_import_sources``
(each campaign's ``source:``) and ``outreach_import_suppression_sources`` (see
:mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.connections import (
    database_url,
)
from outreach.airflow.tasks_common import config_check_task
from outreach.airflow.who import airflow_who
from outreach.logutil import log


def import_task(campaign_file: str, mailbox_file: str, leads_file: str,
                suppressions_file: str | None) -> dict[str, Any]:
    """Import a do-not-contact list (optional) then a leads CSV; return the import summary.

    Paths inside ``OUTREACH_IMPORT_ROOTS`` (campaign and mailbox files inside ``include/``); progress
    logged every :data:`outreach.leads.PROGRESS_ROWS` rows. Bad rows never fail the task.

    :raises airflow.sdk.exceptions.AirflowFailException: a file missing, outside the folders or
        unusable as a whole, or nothing imported: no retry (it reads the same file), one line naming
        the file and what to fix."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.campaign import ConfigError
    from outreach.leadfile import ImportFileError

    config_check_task()
    try:
        return _import(database_url(), campaign_file, mailbox_file, leads_file, suppressions_file)
    except (ImportFileError, ConfigError, FileNotFoundError) as exc:
        # The file as a whole is missing or unusable: a retry reads the same file, so the task
        # fails at once with what to fix.
        raise AirflowFailException(f"{exc} (fix the file or the path and trigger again)") from None


def announce_leads(outlet_events: Any, summary: dict[str, Any]) -> str | None:
    """Update the leads Asset of the campaign a file import filled, so ``outreach_queue_due`` queues
    at once; return the URI (``None``: nothing imported).

    :param outlet_events: the task context's ``outlet_events``.
    :param summary: :func:`import_task`'s result."""
    from airflow.sdk import Asset

    from outreach.airflow.defaults import leads_alias
    from outreach.sources import lead_asset_uri

    leads = summary.get("leads") or {}
    key = leads.get("campaign_key")
    counts = {k: int(leads.get(k) or 0) for k in ("imported", "updated", "enrolled")}
    if not key or not any(counts.values()):
        return None
    uri = lead_asset_uri(key)
    outlet_events[leads_alias()].add(Asset(uri), extra=counts)
    log.info("leads Asset %s updated: outreach_queue_due queues the new leads now", uri)
    return uri


def _import(url: str, campaign_file: str, mailbox_file: str, leads_file: str,
            suppressions_file: str | None) -> dict[str, Any]:
    from outreach.leadfile import ImportFileError, import_path
    from outreach.leads import PROGRESS_ROWS, import_leads, progress_line
    from outreach.paths import project_root
    from outreach.suppression import import_suppressions

    # The form's campaign and mailbox files are the project's reviewed configuration: nothing
    # outside its include/ folder is read (a YAML error would quote the file's lines).
    config = (project_root() / "include",)
    for path in (campaign_file, mailbox_file):
        import_path(path, roots=config, hint="campaign and mailbox files live in the project's include/")
    out: dict[str, Any] = {}
    if suppressions_file:
        sup = import_suppressions(url, suppressions_file, who=airflow_who("import"))
        for p in sup.problems:
            log.warning("%s, %s", suppressions_file, p)
        log.info("suppressions %s: added=%s known=%s invalid=%s cancelled=%s", suppressions_file,
                 sup.added, sup.known, sup.invalid, sup.cancelled)
        out["suppressions"] = {"added": sup.added, "known": sup.known, "invalid": sup.invalid}
    result = import_leads(url, campaign_file, mailbox_file, leads_file,
                          progress=lambda rows, seconds: log.info(progress_line(leads_file, rows, seconds)),
                          progress_every=PROGRESS_ROWS)
    for p in result.problems:
        log.warning("%s, %s", leads_file, p)
    if result.problems_omitted:
        log.warning("%s: %s more problems (outreach import show %s --problems)", leads_file,
                    result.problems_omitted, result.run_id)
    if result.suppressed_lines:
        log.info("%s: suppressed addresses on lines %s (not stored)", leads_file,
                 result.suppressed_lines)
    log.info(result.summary())  # last: the line an operator reads first in the task log
    if (why := result.nothing_imported()) is not None:
        raise ImportFileError(why)
    out["leads"] = result.to_dict()
    return out


def source_import_task(campaign_file: str) -> dict[str, Any]:
    """Import one campaign's declared source (:func:`outreach.sources.import_source`); log the
    problems and one summary line per import; return the counts.

    :raises outreach.leadfile.ImportFileError: rows or an object unusable as a whole (the task
        fails; clearing it is safe: an object is imported once, a SQL source re-read changes
        only what changed).
    :raises outreach.sources.SourceError: the source cannot be read.
    """
    from outreach.sources import import_source

    config_check_task()
    results = import_source(database_url(), campaign_file, "include/mailboxes.yaml")
    total: dict[str, Any] = {"imports": len(results), "imported": 0, "updated": 0,
                             "unchanged": 0, "invalid": 0, "suppressed": 0, "stopped": 0,
                             "run_ids": []}
    for r in results:
        for p in r.problems[:100]:
            log.warning("%s, %s", r.file, p)
        log.info(r.summary())
        for k in ("imported", "updated", "unchanged", "invalid", "suppressed", "stopped"):
            total[k] += getattr(r, k)
        total["run_ids"].append(r.run_id)
    if not results:
        log.info("%s: nothing new in the source", campaign_file)
    return total


def suppression_source_task(name: str) -> dict[str, Any]:
    """Import one do-not-contact source of the suppression sources file
    (:func:`outreach.airflow.suppression_sources.import_source`, which logs each bad row with
    source, row and field, and one summary line per import); return the counts.

    :raises outreach.sources.SourceError: the source is not declared or cannot be read.
    :raises outreach.leadfile.ImportFileError: object(s) of a file source unusable as a whole (the
        task fails after importing the others; clearing it is safe: known entries add nothing).
    """
    from outreach.airflow.suppression_sources import import_source, source_named

    config_check_task()
    results = import_source(database_url(), source_named(name))
    total: dict[str, Any] = {"imports": len(results), "added": 0, "known": 0, "invalid": 0,
                             "cancelled": 0}
    for r in results:  # each import's problems and summary are logged as it commits
        for k in ("added", "known", "invalid", "cancelled"):
            total[k] += getattr(r, k)
    if not results:
        log.info("suppression source %s: nothing new", name)
    return total
