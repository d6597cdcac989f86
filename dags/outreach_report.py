"""
### outreach_report

Prints the campaign report to the task log every morning (and whenever triggered): per campaign,
sequence step and mailbox — queued, sending, sent, failed by reason, unconfirmed, suppressed;
today's sends against each mailbox's limit; paused mailboxes with their reasons. The same report
as `outreach report`.

**Clearing `report` is safe**: it only reads.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from outreach import airflow_adapter


@dag(
    dag_id="outreach_report",
    schedule="0 7 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["outreach"],
    doc_md=__doc__,
    default_args={"owner": "outreach", "retries": 1},
)
def outreach_report():
    @task
    def report() -> dict:
        return airflow_adapter.report_task()

    report()


outreach_report()
