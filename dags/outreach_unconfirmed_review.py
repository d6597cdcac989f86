"""
### outreach_unconfirmed_review (Required Actions)

Opens a **Required Action** (Airflow's human-in-the-loop task) for unconfirmed emails no Required
Action listed yet. It runs when `outreach_send` finds new unconfirmed emails (the asset
`outreach_unconfirmed`), or when triggered.

* **collect** lists the new unconfirmed emails — campaign, step, masked recipient, Message-ID,
  when it was handed over, the SMTP stage and reply, and Sent-folder evidence when there is
  some. Each email is listed by one Required Action only (recorded in `outreach.alerts`).
  Skipped when there is none.
* **decide** waits for a person: *was sent*, *not sent, requeue* or *leave for later* (none is
  preselected, and there is no timeout). **Check the mailboxes' Sent Items first.**
* **record** applies the answer to exactly the listed emails, as `outreach resolve` records it,
  with the Airflow user who answered. *Leave for later* changes nothing; the emails stay in
  `outreach unconfirmed`, on the campaign page and for `outreach_resolve_unconfirmed`.

**Clearing `record` is safe**: every change is guarded by "still unconfirmed".
"""

from __future__ import annotations

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import dag, task

from outreach.airflow import defaults, tasks


@dag(
    dag_id="outreach_unconfirmed_review",
    doc_md=__doc__,
    **{**defaults.dag_kwargs(operator=True),
       # An asset, not a clock: OUTREACH_SCHEDULES leaves it on.
       "schedule": [defaults.unconfirmed_asset()]},
)
def outreach_unconfirmed_review():
    @task
    def collect(**context) -> dict:
        return tasks.review_collect_task(context["run_id"])

    decide = HITLOperator(
        task_id="decide",
        subject="{{ ti.xcom_pull(task_ids='collect')['subject'] }}",
        body="{{ ti.xcom_pull(task_ids='collect')['body'] }}",
        options=list(defaults.REVIEW_OPTIONS),
        defaults=None,
        multiple=False,
    )

    @task
    def record(collected: dict, response: dict, **context) -> dict:
        return tasks.review_record_task(collected, response, context["dag"].dag_id,
                                        context["run_id"])

    collected = collect()
    collected >> decide
    record(collected, decide.output)


outreach_unconfirmed_review()
