"""
### outreach_mailbox_pause

Pauses one sending mailbox, for an operator (a trigger form: mailbox, reason, operator).

* **pause** sets the mailbox `paused` with the reason, the time and who, in one guarded UPDATE
  (only an active mailbox changes) that also writes the history row
  (`outreach.mailbox_events`). From then on no send task claims its emails: they stay queued.

**Clearing `pause` is safe**: pausing a paused mailbox changes nothing and keeps the first
reason. Resume with `outreach_mailbox_resume` (or `outreach mailbox resume`).
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_mailbox_pause",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "mailbox": Param(type="string", minLength=1, title="Mailbox",
                         description="The mailbox's address or id."),
        "reason": Param(type="string", minLength=1, title="Reason",
                        description="Why it is paused (recorded with the pause)."),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who pauses it (recorded)."),
    },
)
def outreach_mailbox_pause():
    @task
    def pause() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.pause_task(p["mailbox"], p["reason"], p["operator"])

    pause()


outreach_mailbox_pause()
