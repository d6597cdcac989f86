"""
### outreach_import_sources

Imports the leads of every campaign whose file declares a `source:` (a warehouse query through an
Airflow SQL connection, or files in object storage), hourly. A campaign whose `schedule:` is
another cron, or an Asset URI an upstream DAG updates (a dbt run), gets its own DAG
`outreach_import_source_<key>` on that schedule.

* **import_<campaign>** reads the source with the CSV importer's checks, deduplication,
  suppression and stored run (see `outreach.sources`), then updates the Asset
  `outreach://leads/<campaign>`: `outreach_queue_due` is scheduled on those Assets or its cron.

**Clearing an import task is safe**: a file source's object is imported once (claimed under a
UNIQUE constraint in the import's transaction); a SQL source read again changes only the leads
whose rows changed. A lead whose row left the source is never deleted (`stop_when_missing: true`
stops its enrolment).
"""

from __future__ import annotations

from airflow.sdk import Asset, dag, task

from outreach.airflow import defaults, tasks_import
from outreach.sources import lead_asset_uri


def _build(spec: dict) -> None:
    @dag(dag_id=spec["dag_id"], doc_md=__doc__,
         **defaults.dag_kwargs(schedule=defaults.dag_schedule(spec["schedule"]),
                               retries=2, max_active_runs=1))
    def import_sources():
        for campaign_file, key in spec["campaigns"]:
            task(task_id=f"import_{key.replace('-', '_')}",
                 outlets=[Asset(lead_asset_uri(key))])(tasks_import.source_import_task)(
                     campaign_file)
        if not spec["campaigns"]:
            @task
            def no_sources() -> str:
                return "no campaign file declares a source: (see docs/howto/sources.md)"

            no_sources()

    import_sources()


for _spec in defaults.source_dags():
    _build(_spec)
