"""
### outreach_resolve_unconfirmed (manual)

An *unconfirmed* email may or may not have reached the recipient: the end of DATA was sent and no
reply came, or a sender was lost while handing the row over. **Check the mailbox's Sent Items
(or the provider's logs) before doing anything** (`outreach unconfirmed` lists them; so does this
DAG's log, first), then trigger this DAG. A row marked **EVIDENCE: accepted late at …** was
accepted by the server after the reaper had taken it (the reply and Message-ID are shown):
*was sent* is the answer, and the evidence is kept with the decision.

* **was sent** — records it in the send log as operator-confirmed; it counts as sent.
* **not sent** — puts it back in the queue with the same idempotency key and Message-ID.

Select emails by id, or by campaign and/or mailbox. Nothing else ever moves an unconfirmed row
(a database trigger refuses it).

**Clearing `resolve` is safe**: each change is guarded by "still unconfirmed", so a second run
resolves nothing twice.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach import airflow_adapter


@dag(
    dag_id="outreach_resolve_unconfirmed",
    doc_md=__doc__,
    **airflow_adapter.dag_kwargs(operator=True),
    params={
        "decision": Param("was_sent", type="string", enum=["was_sent", "not_sent"], title="Decision",
                          values_display={"was_sent": "It was sent (found in Sent Items)",
                                          "not_sent": "It was not sent: requeue it"}),
        "email_ids": Param([], type="array", items={"type": "integer"}, title="Email ids",
                           description="Leave empty to select by campaign and/or mailbox."),
        "campaign_key": Param(None, type=["null", "string"], title="Campaign key"),
        "mailbox": Param(None, type=["null", "string"], title="Mailbox address or id",
                         examples=airflow_adapter.mailbox_addresses()),
        "resolved_by": Param("", type="string", minLength=1, title="Your name",
                             description="Recorded with the decision."),
        "note": Param("", type="string", title="Note"),
    },
)
def outreach_resolve_unconfirmed():
    @task
    def resolve() -> dict:
        p = get_current_context()["params"]
        return airflow_adapter.resolve_task(p["decision"], p["resolved_by"], p["email_ids"] or None,
                                            p["campaign_key"], p["mailbox"], p["note"])

    resolve()


outreach_resolve_unconfirmed()
