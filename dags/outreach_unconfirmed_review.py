"""
### outreach_unconfirmed_review (Required Actions)

Opens a **Required Action** (Airflow's human-in-the-loop task) for unconfirmed emails no Required
Action listed yet. It runs when `outreach_send` finds unconfirmed emails no Required Action
listed (the asset `outreach_unconfirmed`: every send run updates it while there are any, so a
run missed while this DAG was paused is caught up by the next send run), or when triggered.
It is **not paused** when first deployed.

* **collect** lists the new unconfirmed emails — campaign, step, masked recipient, Message-ID,
  when it was handed over, the SMTP stage and reply, and Sent-folder evidence when there is
  some. Each email is listed by one Required Action only (recorded in `outreach.alerts`).
  Skipped when there is none.
* **decide** waits for a person: *was sent*, *not sent, requeue* or *leave for later* (none is
  preselected, and there is no timeout). **Check the mailboxes' Sent Items first**: the second
  column says what was checked (*checked: found / not found in Sent folder …* or *not checked:
  no IMAP connection …*).
* **confirm_requeue** (only after *not sent, requeue*, skipped otherwise) asks again, with the
  same evidence: *yes, send them again* or *no, leave them for later*. A requeue sends a message
  that may have been delivered a second time.
* **record** applies the (confirmed) answer to exactly the listed emails, as `outreach resolve` records it,
  with the Airflow user who answered. *Leave for later* changes nothing; the emails stay in
  `outreach unconfirmed`, on the campaign page and for `outreach_resolve_unconfirmed`.

**Clearing `record` is safe**: every change is guarded by "still unconfirmed".
"""

from __future__ import annotations

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import TriggerRule, dag, task

from outreach.airflow import defaults, tasks_unconfirmed
from outreach.airflow.hitl import ConfirmRequeue


@dag(
    dag_id="outreach_unconfirmed_review",
    doc_md=__doc__,
    **{**defaults.dag_kwargs(operator=True),
       # An asset, not a clock: OUTREACH_SCHEDULES leaves it on.
       "schedule": [defaults.unconfirmed_asset()],
       # Never paused when first seen: a paused DAG misses the asset events (Airflow queues only
       # unpaused consumers), and the alert and the red task both point here.
       "is_paused_upon_creation": False},
)
def outreach_unconfirmed_review():
    @task
    def collect(**context) -> dict:
        return tasks_unconfirmed.review_collect_task(context["run_id"])

    decide = HITLOperator(
        task_id="decide",
        subject="{{ ti.xcom_pull(task_ids='collect')['subject'] }}",
        body="{{ ti.xcom_pull(task_ids='collect')['body'] }}",
        options=list(defaults.REVIEW_OPTIONS),
        defaults=None,
        multiple=False,
    )

    confirm = ConfirmRequeue(
        task_id="confirm_requeue",
        decide_task_id="decide",
        answer="not sent, requeue",
        subject="{{ ti.xcom_pull(task_ids='collect')['confirm_subject'] }}",
        body="{{ ti.xcom_pull(task_ids='collect')['confirm_body'] }}",
        options=list(tasks_unconfirmed.CONFIRM_OPTIONS),
        defaults=None,
        multiple=False,
    )

    @task(trigger_rule=TriggerRule.NONE_FAILED)
    def record(collected: dict, response: dict, **context) -> dict:
        # None when confirm_requeue was skipped (another answer than a requeue).
        confirmation = context["ti"].xcom_pull(task_ids="confirm_requeue")
        return tasks_unconfirmed.review_record_task(collected, response, context["dag"].dag_id,
                                                    context["run_id"], confirmation)

    collected = collect()
    collected >> decide >> confirm
    record(collected, decide.output) << confirm


outreach_unconfirmed_review()
