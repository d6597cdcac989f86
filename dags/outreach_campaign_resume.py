"""
### outreach_campaign_resume

Resumes one paused campaign, for an operator (a trigger form: campaign key, why, operator).

* **resume** sets the campaign `active` in one guarded UPDATE (only a paused campaign changes)
  that also records who resumed it and why (`outreach.campaign_events`). Its queued steps may be
  claimed again; steps that fell due meanwhile are queued by the next `outreach_queue_due`.

The backlog is not released in one burst: each mailbox's daily cap and each `outreach_send`
run's steady rate still apply (pacing, `mailbox_remaining_today`). **Clearing `resume` is safe**:
resuming an active campaign changes nothing.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_campaign_resume",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "campaign": Param(type="string", minLength=1, title="Campaign key",
                          description="The campaign's key (as in its campaign file)."),
        "why": Param(type="string", minLength=1, title="Why",
                     description="Why it may send again (recorded with the resume)."),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who resumes it (recorded)."),
    },
)
def outreach_campaign_resume():
    @task
    def resume() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.campaign_resume_task(p["campaign"], p["operator"], p["why"])

    resume()


outreach_campaign_resume()
