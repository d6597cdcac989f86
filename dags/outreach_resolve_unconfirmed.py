r"""
### outreach_resolve_unconfirmed (manual)

An *unconfirmed* email may or may not have reached the recipient: the end of DATA was sent and no
reply came, or a sender was lost while handing the row over. **Check the mailbox's Sent Items
(or the provider's logs) before doing anything** (`outreach unconfirmed` lists them; so does this
DAG's log, first), then trigger this DAG. A row marked **EVIDENCE: accepted late at …** was
accepted by the server after the reaper had taken it (the reply and Message-ID are shown):
*was sent* is the answer, and the evidence is kept with the decision.

* **was sent** — records it in the send log as operator-confirmed; it counts as sent.
* **not sent** — puts it back in the queue with the same idempotency key and Message-ID.
* **was sent where found in Sent** — every selected email whose Message-ID is in its mailbox's
  Sent folder (the IMAP folder flagged `\Sent`) is resolved *was sent*, with that evidence as the
  note; the others stay for a person (not found proves nothing).

The first task, **evidence**, logs each selected email's Message-ID and what its mailbox's Sent
folder says (found, with the date / not found / no IMAP account), whatever the decision.

Select emails by id (one comma-separated text: `288, 290`), or by campaign and/or mailbox. There is
no default decision. Ids that are not unconfirmed fail the run with their list, and so does a run
that resolved nothing. Nothing else ever moves an unconfirmed row (a database trigger refuses it).
For one run's new unconfirmed emails, the Required Action of `outreach_unconfirmed_review` is
simpler; this DAG is for bulk decisions.

**Clearing either task is safe** (`evidence` only reads): each change is guarded by "still
unconfirmed", so a second run resolves nothing twice (and fails, saying so).
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_unconfirmed


@dag(
    dag_id="outreach_resolve_unconfirmed",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "decision": Param(type="string",
                          enum=["was_sent", "not_sent", "was_sent_if_found"], title="Decision",
                          values_display={"was_sent": "It was sent (found in Sent Items)",
                                          "not_sent": "It was not sent: requeue it",
                                          "was_sent_if_found": "Was sent where found in the "
                                                               "Sent folder (the rest stays)"},
                          description="No default: choose after checking Sent Items."),
        "email_ids": Param("", type="string", title="Email ids",
                           pattern=r"^[\s,]*([0-9]+[\s,]*)*$",
                           description="Comma-separated, e.g. 288, 290. Leave empty to select "
                                       "by campaign and/or mailbox."),
        "campaign_key": Param(None, type=["null", "string"], title="Campaign key"),
        "mailbox": Param(None, type=["null", "string"], title="Mailbox address or id",
                         examples=defaults.mailbox_addresses()),
        "resolved_by": Param("", type="string", minLength=1, title="Your name",
                             description="Recorded with the decision."),
        "note": Param("", type="string", title="Note"),
    },
)
def outreach_resolve_unconfirmed():
    @task
    def evidence() -> list:
        p = get_current_context()["params"]
        return tasks_unconfirmed.evidence_task(p["email_ids"],
                                               p["campaign_key"], p["mailbox"])

    @task
    def resolve() -> dict:
        p = get_current_context()["params"]
        return tasks_unconfirmed.resolve_task(p["decision"], p["resolved_by"], p["email_ids"],
                                              p["campaign_key"], p["mailbox"], p["note"])

    evidence() >> resolve()


outreach_resolve_unconfirmed()
