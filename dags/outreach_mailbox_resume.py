"""
### outreach_mailbox_resume

Resumes one paused mailbox, for an operator (a trigger form: mailbox, why, operator). Automatic
pauses (Postmaster spam rate, hard-bounce rate) are only ever lifted here or with
`outreach mailbox resume`.

* **resume** sets the mailbox `active` in one guarded UPDATE (only a paused mailbox changes) that
  also records who resumed it and why (`outreach.mailbox_events`).

The backlog is not released in one burst: the day's cap and each `outreach_send` run's steady
rate still apply (pacing, `mailbox_remaining_today`). **Clearing `resume` is safe**: resuming an
active mailbox changes nothing.
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_operator


@dag(
    dag_id="outreach_mailbox_resume",
    doc_md=__doc__,
    **defaults.dag_kwargs(operator=True),
    params={
        "mailbox": Param(type="string", minLength=1, title="Mailbox",
                         description="The mailbox's address or id."),
        "why": Param(type="string", minLength=1, title="Why",
                     description="Why it may send again (recorded with the resume)."),
        "operator": Param(type="string", minLength=1, title="Operator",
                          description="Who resumes it (recorded)."),
    },
)
def outreach_mailbox_resume():
    @task
    def resume() -> dict:
        p = get_current_context()["params"]
        return tasks_operator.resume_task(p["mailbox"], p["operator"], p["why"])

    resume()


outreach_mailbox_resume()
