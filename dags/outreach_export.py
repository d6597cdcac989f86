"""
### outreach_export

Copies the event log (sent, replied, bounced, unsubscribed, …) out, incrementally, in batches of
`OUTREACH_EXPORT_BATCH_SIZE` events (default 5000), to whichever targets are configured:

* **to_sql** — tables `outreach_events` (one row per event id) and `outreach_email_timeline`
  (one row per email: first sent, replied, bounced… time) behind the Airflow SQL connection
  `OUTREACH_EXPORT_CONN_ID` (or the `conn_id` param). Skipped when unset.
* **to_files** — one JSON-lines file per batch, `events-<first id>-<last id>.jsonl`, under the
  ObjectStoragePath `OUTREACH_EXPORT_PATH` (or the `path` param). Skipped when unset.

Each target keeps its own cursor in `outreach.export_cursors`, moved only after the batch is
written. **Clearing a task is safe**: a killed or cleared run writes its last batch again (same
event ids, same file) and goes on — no gap, no second copy. Runs only when triggered (or on a
schedule your deployment gives it). See docs/howto/warehouse-export.md.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_export


@dag(
    dag_id="outreach_export",
    doc_md=__doc__,
    **defaults.dag_kwargs(),
    max_active_runs=1,
    params={
        "conn_id": Param(None, type=["null", "string"], title="SQL connection",
                         description="Airflow SQL connection id (default OUTREACH_EXPORT_CONN_ID)."),
        "path": Param(None, type=["null", "string"], title="File folder",
                      description="ObjectStoragePath URL (default OUTREACH_EXPORT_PATH)."),
        "batch_size": Param(None, type=["null", "integer"], minimum=1, maximum=100_000,
                            title="Batch size", description="Events per batch."),
    },
)
def outreach_export():
    @task
    def to_sql() -> dict:
        return tasks_export.export_task("sql", get_current_context()["params"])

    @task
    def to_files() -> dict:
        return tasks_export.export_task("files", get_current_context()["params"])

    to_sql()
    to_files()


outreach_export()
