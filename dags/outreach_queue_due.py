"""
### outreach_queue_due

Queues the due sequence step of every enrolled lead, every 15 minutes.

* **queue_due** first fails rows left `sending` for over the reaper threshold (default 30 minutes)
  as *unconfirmed* ("check Sent Items before doing anything"), then inserts, in one statement,
  step 1 for new enrolments and step n for leads whose step n-1 was sent long enough ago.
  Suppressed addresses are skipped.

**Clearing `queue_due` is safe**: a row per (lead, sequence step) is enforced by a UNIQUE
constraint, so a second run queues nothing twice.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from outreach import airflow_adapter


@dag(
    dag_id="outreach_queue_due",
    schedule="*/15 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outreach"],
    doc_md=__doc__,
    default_args={"owner": "outreach", "retries": 2},
)
def outreach_queue_due():
    @task
    def queue_due() -> dict:
        return airflow_adapter.queue_task()

    queue_due()


outreach_queue_due()
