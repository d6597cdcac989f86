"""
### outreach_transactional

Transactional mail (a signup welcome email…) with a durable **delivery key**.

* **Triggered with conf** `{"delivery_key": "…", "to": "…", "template": "welcome", "context": {…}}`
  (REST API: `POST /api/v2/dags/outreach_transactional/dagRuns`), **enqueue** stores the email
  under its key and **send** sends it in the same run. Two triggers with the same key make one
  email row (the key is UNIQUE) and one message.
* **Scheduled** (every minute; `OUTREACH_TRANSACTIONAL_SCHEDULE`) it is a send cycle for rows an
  application enqueued in its own transaction (`outreach.transactional.enqueue` or the SQL
  function `outreach.enqueue_transactional`).

Same send path as campaigns: one claim function (`outreach.claim_emails_v1`: `FOR NO KEY UPDATE
SKIP LOCKED`, a claim token), the send log written only after the server accepted, the same
fault classes (retry after 30 minutes, at most 3 attempts; unconfirmed never retried) and the same
suppression function, asked for the transactional class (marketing unsubscribes do not stop a
welcome email; hard bounces and manual blocks do). No warm-up, cap or send window; no
List-Unsubscribe headers.

**Clearing is safe**: a cleared *enqueue* finds its key; a cleared *send* claims only rows
still queued.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_transactional


@dag(
    dag_id="outreach_transactional",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule=defaults.transactional_schedule(), retries=2,
                          max_active_runs=8),
    params={
        "delivery_key": Param(None, type=["null", "string"], maxLength=200, title="Delivery key",
                              description="Made by the application when the request arrived; "
                                          "empty: only send what is queued."),
        "to": Param(None, type=["null", "string"], title="Recipient"),
        "template": Param("welcome", type="string", title="Template",
                          description="include/templates/<name>.{subject,txt,html}.j2"),
        "context": Param({}, type="object", title="Template variables"),
        "mailbox": Param(None, type=["null", "string"], title="Sending mailbox",
                         description="Default: the mailbox marked transactional."),
    },
)
def outreach_transactional():
    @task
    def enqueue() -> dict | None:
        ctx = get_current_context()
        return tasks_transactional.transactional_enqueue_task(ctx["params"], ctx["dag_run"].conf)

    # In the SMTP pool like the campaigns' send_batch, and ahead of them when slots are scarce.
    @task(pool=defaults.SMTP_POOL, priority_weight=100)
    def send(enqueued: dict | None) -> dict:
        return tasks_transactional.transactional_send_task()

    send(enqueue())


outreach_transactional()
