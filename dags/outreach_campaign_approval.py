"""
### outreach_campaign_approval (Required Actions)

Opens a **Required Action** (Airflow's human-in-the-loop task) to launch a campaign awaiting
approval: one submitted with `outreach campaign submit`, or an active campaign whose templates,
subjects or steps changed (a second approval). It runs every five minutes (one campaign per run:
each submission is listed once), or when triggered — the **campaign** field names one
campaign (its key) to list again. It is **not paused** when first deployed.

* **collect** gathers what approving does: the leads step 1 will be sent to and the ones it
  skips, with why; the first days' volume per mailbox under its daily cap and warm-up; the DNS
  preflight per sending domain; two sample renders, as they would be handed over (addresses
  masked). Skipped when nothing awaits approval.
* **decide** waits for a person: *approve* or *reject* (none is preselected, no timeout), with
  a **Reason** field (what a rejection tells the campaign's owner).
* **record** applies the answer with the Airflow user who answered and when: *approve* makes the
  campaign active (the next `outreach_queue_due` queues its steps) — only if its content is
  still the version shown; *reject* sends it back to draft with the reason.

**Clearing `record` is safe**: each change is guarded by "still awaiting approval".
"""

from __future__ import annotations

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param, dag, task

from outreach.airflow import defaults, tasks_approval


@dag(
    dag_id="outreach_campaign_approval",
    doc_md=__doc__,
    params={"campaign": Param(None, type=["null", "string"], title="Campaign (key)",
                              description="Empty: the next campaign awaiting approval")},
    **{**defaults.dag_kwargs(schedule=defaults.APPROVAL_SCHEDULE, operator=True, access="admin"),
       # Never paused when first seen: nobody has to find it and unpause it before a campaign
       # can be launched (like outreach_unconfirmed_review).
       "is_paused_upon_creation": False},
)
def outreach_campaign_approval():
    @task
    def collect(**context) -> dict:
        return tasks_approval.approval_collect_task(context["run_id"], context["params"].get("campaign"))

    decide = HITLOperator(
        task_id="decide",
        subject="{{ ti.xcom_pull(task_ids='collect')['subject'] }}",
        body="{{ ti.xcom_pull(task_ids='collect')['body'] }}",
        options=[tasks_approval.APPROVE, tasks_approval.REJECT],
        defaults=None,
        multiple=False,
        params=defaults.approval_params(),
    )

    @task
    def record(collected: dict, response: dict, **context) -> dict:
        return tasks_approval.approval_record_task(collected, response, context["dag"].dag_id,
                                                   context["run_id"])

    collected = collect()
    collected >> decide
    record(collected, decide.output)


outreach_campaign_approval()
