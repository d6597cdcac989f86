"""
### outreach_report

Prints the campaign report to the task log every morning (and whenever triggered): per campaign,
sequence step and mailbox — queued, sending, sent, failed by reason, unconfirmed, suppressed;
today's sends against each mailbox's limit; paused mailboxes with their reasons. The same report
as `outreach report`.

**Clearing `report` is safe**: it only reads.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_report",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule="0 7 * * *"),
)
def outreach_report():
    @task
    def report() -> dict:
        return tasks_operator.report_task()

    report()


outreach_report()
