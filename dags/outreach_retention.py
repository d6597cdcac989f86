"""
### outreach_retention

Every night, blanks personal content older than its limit: what inbound messages said about a
person (sender, subject, the address a report named, diagnostic; after
`OUTREACH_RETENTION_INBOUND_DAYS`, default 90) and import runs' problem lines (after
`OUTREACH_RETENTION_IMPORT_PROBLEM_DAYS`, default 30). The rows and their counts stay; the send
log is never purged. One summary line in the task log.

**Clearing `purge` is safe**: a row already blanked is not touched again.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults


@dag(
    dag_id="outreach_retention",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule="30 3 * * *"),
)
def outreach_retention():
    @task
    def purge() -> dict:
        from dataclasses import asdict

        from outreach.airflow.connections import database_url
        from outreach.retention import purge

        return asdict(purge(database_url()))

    purge()


outreach_retention()
