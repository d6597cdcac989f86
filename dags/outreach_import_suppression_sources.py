"""
### outreach_import_suppression_sources

Imports the do-not-contact sources declared under `suppressions:` in the suppression sources file
(`include/suppression_sources.yaml`, or `OUTREACH_SUPPRESSION_SOURCES`): a warehouse or CRM query
through an Airflow SQL connection, or do-not-contact CSVs in object storage, hourly.

* **import_<source>** reads the source through the one suppression import path (see
  `outreach.airflow.suppression_sources`): each entry becomes one suppression (source
  `suppressions:<name>`, history in `outreach.suppression_events`), and the queued emails it
  covers are cancelled in the same transaction. A bad row is logged with the source, its row and
  field; the rest is imported.

**Clearing an import task is safe**: a known entry adds nothing, a file's object is imported once.
An entry that leaves the source **stays suppressed**: only an operator unsuppresses
(`outreach unsuppress` or `outreach_unsuppress`). See docs/howto/suppressions.md.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults, tasks_import


@dag(dag_id="outreach_import_suppression_sources", doc_md=__doc__,
     **defaults.dag_kwargs(schedule=defaults.SUPPRESSION_SOURCES_SCHEDULE, retries=2,
                           max_active_runs=1))
def import_suppression_sources():
    names = defaults.suppression_source_names()
    for name in names:
        task(task_id=f"import_{name.replace('-', '_')}")(tasks_import.suppression_source_task)(name)
    if not names:
        @task
        def no_sources() -> str:
            return "no suppressions: source declared (see docs/howto/suppressions.md)"

        no_sources()


import_suppression_sources()
