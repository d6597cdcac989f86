"""
### outreach_suppress (manual)

Suppresses an address (`jane@acme.com`) or a whole domain (`@acme.com`): nothing more is sent to
it, and its queued sequence steps are cancelled in the same transaction. The decision itself is
always made by the one SQL function `outreach.is_suppressed()`, at import, at queueing and right
before each SMTP handoff.

**Admins only**: its `access_control` names the role Admin alone (analysts and operators
see it but cannot trigger it; docs/howto/users-and-roles.md).

**Clearing `suppress` is safe**: a suppression is unique per address or domain, so a second run
adds nothing.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_suppress",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True, access="admin"),
    params={
        "value": Param("", type="string", minLength=3, title="Address or @domain"),
        "reason": Param("manual", type="string", title="Reason",
                        enum=["manual", "unsubscribed", "bounced", "complained", "do-not-contact"]),
        "requested_by": Param("", type="string", minLength=1, title="Your name",
                              description="Recorded as the source of the suppression."),
    },
)
def outreach_suppress():
    @task
    def suppress() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.suppress_task(p["value"], p["reason"], p["requested_by"])

    suppress()


outreach_suppress()
