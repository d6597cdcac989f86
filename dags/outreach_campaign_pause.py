"""
### outreach_campaign_pause

Pauses one campaign, for an operator (a trigger form: campaign key, reason, operator).

* **pause** sets the campaign `paused` with the reason, the time and who, in one guarded UPDATE
  (only an active campaign changes) that also writes the history row
  (`outreach.campaign_events`). From then on `outreach_queue_due` queues none of its steps and no
  send task claims its queued ones: they stay queued. A handoff already under way finishes.

**Clearing `pause` is safe**: pausing a paused campaign changes nothing and keeps the first
reason. Resume with `outreach_campaign_resume` (or `outreach campaign resume`).
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_campaign_pause",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "campaign": Param(type="string", minLength=1, title="Campaign key",
                          description="The campaign's key (as in its campaign file)."),
        "reason": Param(type="string", minLength=1, title="Reason",
                        description="Why it is paused (recorded with the pause)."),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who pauses it (recorded)."),
    },
)
def outreach_campaign_pause():
    @task
    def pause() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.campaign_pause_task(p["campaign"], p["reason"], p["operator"])

    pause()


outreach_campaign_pause()
