"""
### outreach_lead_erase

Erases one person on request (GDPR Art. 17), for an admin (a trigger form: address, reason,
operator). Their personal data is removed from every table outreach keeps (lead fields and
custom columns, rendered subjects, inbound messages, bounce reports, event payloads, import
problem lines, suppression history), and their address is kept only as a keyed hash
(`OUTREACH_ERASURE_KEY`) that refuses it at import, queueing and the handoff, forever. The
email rows and the send log keep their Message-ID, status and times. The task log and the
`outreach.erasures` record carry counts per table, never the address.

* **erase** calls `outreach.erase_person_v1` (one transaction). With no key it fails with one
  line; while an email to the person is being sent it fails and its retry runs it again.

**Clearing `erase` is safe**: a second erasure changes nothing more and records itself again.
The address typed into this form stays in the run's configuration in Airflow's metadata
database: delete the DAG run afterwards, or use `outreach lead erase` (docs/howto/erasure.md).
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_lead_erase",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True, access="admin"),
    params={
        "address": Param(type="string", minLength=3, title="Address",
                         description="The person's email address (any spelling)."),
        "reason": Param(type="string", minLength=1, title="Reason",
                        description="Why, e.g. a ticket number (recorded; must not name the "
                                    "person)."),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who erases (recorded)."),
    },
)
def outreach_lead_erase():
    @task
    def erase() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.lead_erase_task(p["address"], p["reason"], p["operator"])

    erase()


outreach_lead_erase()
