"""
### outreach_requeue (manual)

Puts emails that **failed without ever being accepted** back in the queue — `failed` with
`retries_exhausted`: every attempt got a 4xx or lost its connection before the end of DATA (a
relay down for hours, a mailbox full since emptied). Fix the cause first, then trigger this DAG.
Each email starts again with its full attempts and the same Message-ID; the pre-send
suppression check still applies.

Never requeued here: *unconfirmed* emails (they may have gone out: check Sent Items and use
`outreach_resolve_unconfirmed`) and permanent failures (5xx: they would fail again).

Select emails by id, or by campaign and/or mailbox; nothing selected means every
`retries_exhausted` email. Who and why are recorded in `outreach.email_requeues`.

**Clearing `requeue` is safe**: the change is guarded by "still failed with that kind", so a
second run requeues nothing twice.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_requeue",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "failed_kind": Param("retries_exhausted", type="string", enum=["retries_exhausted", "sender_refused"],
                             title="Failure kind",
                             values_display={"retries_exhausted": "Not accepted, attempts used up",
                                             "sender_refused": "Refused for a reason of ours (fixed)"}),
        "email_ids": Param([], type="array", items={"type": "integer"}, title="Email ids",
                           description="Leave empty to select by campaign and/or mailbox."),
        "campaign_key": Param(None, type=["null", "string"], title="Campaign key"),
        "mailbox": Param(None, type=["null", "string"], title="Mailbox address or id",
                         examples=defaults.mailbox_addresses()),
        "requested_by": Param("", type="string", minLength=1, title="Your name",
                              description="Recorded with the requeue."),
        "reason": Param("", type="string", minLength=1, title="Why",
                        description="What was fixed (recorded), e.g. a ticket reference."),
    },
)
def outreach_requeue():
    @task
    def requeue() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.requeue_task(p["failed_kind"], p["requested_by"], p["reason"],
                                           p["email_ids"] or None, p["campaign_key"], p["mailbox"])

    requeue()


outreach_requeue()
