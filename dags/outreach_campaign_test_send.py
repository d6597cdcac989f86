"""
### outreach_campaign_test_send

Sends one step of a campaign, rendered for a lead, to seed addresses (a trigger form: campaign
key, seed addresses, optional lead and step, operator): the proof a campaign owner reads in their
own inbox before submitting a draft for approval.

* **test_send** builds the message as the send task would (the lead's mailbox, its DKIM key, the
  real templates) and sends it to each seed through that mailbox. It is recorded in
  `outreach.test_sends`, never in the send log, and changes no enrolment, queue row or lead; it
  counts toward the mailbox's daily cap. A suppressed seed is never sent to. The task fails when
  a seed was not accepted, or the mailbox is paused or at its daily limit (the log says which).

**Clearing `test_send` sends the test again** (to the seeds only, counted again toward the cap);
it never reaches a lead. See docs/howto/launch-a-campaign.md.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_campaign_test_send",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True, retries=1),
    params={
        "campaign": Param(type="string", minLength=1, title="Campaign key",
                          description="The campaign's key (as in its campaign file)."),
        "to": Param(type="array", items={"type": "string", "minLength": 3}, minItems=1,
                    title="Seed addresses", description="Where the test goes (one per line)."),
        "lead": Param(None, type=["null", "string"], title="Lead",
                      description="Render for this enrolled lead (empty: the first enrolled)."),
        "step": Param(1, type="integer", minimum=1, title="Step"),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who sends it (recorded)."),
    },
)
def outreach_campaign_test_send():
    @task
    def test_send() -> list[dict]:
        p = get_current_context()["params"]
        return tasks_operator.campaign_test_send_task(p["campaign"], list(p["to"]), p["operator"],
                                                      lead=p["lead"] or None, step=int(p["step"]))

    test_send()


outreach_campaign_test_send()
