"""
### outreach_lead_stop

Stops one lead's enrolment in one campaign, for an operator (a trigger form: address, campaign
key, reason, operator). The lead gets nothing more in that campaign; other campaigns are not
touched.

* **stop** calls `outreach.stop_enrollment` (one transaction): the enrolment becomes `stopped`
  with who, why and when, and every queued step of it is cancelled (status `cancelled`). A step
  being sent at that moment is cancelled by the sender's pre-send check, before the handoff.

**Clearing `stop` is safe**: stopping a stopped enrolment changes nothing and keeps the first
reason. A stop is final (there is no resume): its cancelled steps never go out.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_lead_stop",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "address": Param(type="string", minLength=3, title="Lead address",
                         description="The lead's email address."),
        "campaign": Param(type="string", minLength=1, title="Campaign key",
                          description="The campaign's key (as in its campaign file)."),
        "reason": Param(type="string", minLength=1, title="Reason",
                        description="Why the lead is stopped (recorded)."),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who stops it (recorded)."),
    },
)
def outreach_lead_stop():
    @task
    def stop() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.lead_stop_task(p["address"], p["campaign"], p["reason"],
                                             p["operator"])

    stop()


outreach_lead_stop()
