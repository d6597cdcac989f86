"""
### outreach_webhooks

Every minute, posts new events of `outreach.events` to the webhook endpoints subscribed to their
kind (`outreach webhooks add`), signed in the Standard Webhooks convention (`webhook-id`
`evt_<event id>`, `webhook-timestamp`, `webhook-signature`). **enqueue** turns the events past each
endpoint's watermark into delivery rows (one per endpoint and event); **deliver** posts the due
ones: a 2xx is delivered, anything else is retried with exponential backoff and is *dead* after
`OUTREACH_WEBHOOK_MAX_ATTEMPTS` (8) attempts — `outreach webhooks replay --dead` sends those again.

**Clearing either task is safe**: the enqueue inserts each (endpoint, event) once, and a claimed
delivery is posted by one run only (SKIP LOCKED, a claim token). Receivers de-duplicate by
`webhook-id`: delivery is at least once.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults


@dag(
    dag_id="outreach_webhooks",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule="* * * * *", max_active_runs=1),
)
def outreach_webhooks():
    @task
    def enqueue() -> int:
        from outreach.airflow.connections import database_url
        from outreach.webhooks import enqueue

        return enqueue(database_url())

    @task
    def deliver(queued: int) -> dict:
        from dataclasses import asdict

        from outreach.airflow.connections import database_url, named_secret
        from outreach.webhooks import deliver

        return asdict(deliver(database_url(), secret=named_secret))

    deliver(enqueue())


outreach_webhooks()
