"""
### outreach_notify_replies (on `outreach://events/replies`)

Tells a person about each new reply: **notify** reads the reply events after its cursor and
sends one message per batch through the alert notifier — the SMTP provider's `SmtpNotifier`
to `OUTREACH_ALERT_TO` by default, or any Airflow notifier (Slack's) named by
`OUTREACH_ALERT_NOTIFIER`. Each reply says the lead (masked, `OUTREACH_NOTIFY_MASK=off` shows
it whole), the campaign, the step, the mailbox, the subject and the first lines the lead typed
(`OUTREACH_NOTIFY_LINES`, `OUTREACH_NOTIFY_CHARS`), read again from the mailbox read-only.

Scheduled on the replies Asset that `outreach_inbox` updates when it recorded replies; runs
also when triggered. Skipped (its cursor untouched) while no notifier is configured.

**Clearing is safe.** The cursor (`outreach.export_cursors`, target `notify-replies`) moves only
after a batch was delivered: a cleared or re-run DAG notifies nothing twice; a run killed while
delivering delivers that batch again. See docs/howto/notifications.md.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults, tasks_inbox


@dag(
    dag_id="outreach_notify_replies",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule=[defaults.events_asset("replies")], retries=2),
    max_active_runs=1,
)
def outreach_notify_replies():
    @task
    def notify() -> dict:
        return tasks_inbox.notify_replies_task()

    notify()


outreach_notify_replies()
