"""
### outreach_unsuppress (manual)

Removes the active suppression of an address or a whole domain (`@acme.com`), recording who did
it and why in `outreach.suppression_events`. Emails the suppression already cancelled stay
cancelled: unsuppressing never sends anything by itself. If the address is still covered (for
example by a whole-domain suppression), the log says so.

**Admins only**: its `access_control` names the role Admin alone (analysts and operators
see it but cannot trigger it; docs/howto/users-and-roles.md).

**Clearing `unsuppress` is safe**: a second run finds nothing to remove.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_unsuppress",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True, access="admin"),
    params={
        "value": Param("", type="string", minLength=3, title="Address or @domain"),
        "why": Param("", type="string", minLength=3, title="Why",
                     description="For example: asked to be contacted again (ticket 4711)."),
        "requested_by": Param("", type="string", minLength=1, title="Your name"),
    },
)
def outreach_unsuppress():
    @task
    def unsuppress() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.unsuppress_task(p["value"], p["requested_by"], p["why"])

    unsuppress()


outreach_unsuppress()
