"""
### outreach_inbox (every 10 minutes)

Reads every mailbox's inbox (the IMAP connection `imap_conn_id` of `include/mailboxes.yaml`, and
the account behind the List-Unsubscribe mailto, `unsubscribe_imap_conn_id`): **targets** → one
mapped **read** per account (named by the masked address) → **summary**; and, once every read
has ended (failed or not), **rates**: the hard-bounce and complaint-rate rules (see
`outreach_postmaster`), so a mailbox whose late bounces or complaints cross a threshold is
paused within minutes.

Once every read has ended, **announce** updates the event Assets with new events —
`outreach://events/replies`, `…/auto_replies`, `…/bounces`, `…/complaints`,
`…/unsubscribes` — each with the id range and count in its extra; a family without new events
gets no asset event. A DAG of yours scheduled on one runs after it (docs/howto/notifications.md).

Each new message is classified — bounce (hard/soft), complaint (ARF), unsubscribe by mail,
auto-reply, reply, unmatched — and recorded with its evidence; its effect is applied in the same
transaction: a hard bounce suppresses the address and counts toward the bounce rate, a complaint
suppresses it (complaint rate), an unsubscribe suppresses it and cancels its queued steps, a reply
stops the lead's sequence (`replied`). Auto-replies stop nothing unless the campaign says
`stop_on_auto_reply: true`. Each read logs one summary line per mailbox.

A mailbox that cannot be read fails its task with one line naming the connection and the IMAP
stage (CONNECT, LOGIN, SELECT, SEARCH, FETCH); the other mailboxes are read anyway.

**Clearing is safe.** Every message is recorded under UNIQUE (account, folder, UIDVALIDITY, UID)
and UNIQUE (account, Message-ID), and its effect applied only by the transaction whose insert
succeeded: a cleared, retried or overlapping read changes nothing twice. The mailbox is opened
read-only (`BODY.PEEK`): nothing is marked read, moved or deleted.
"""

from __future__ import annotations

from airflow.sdk import TriggerRule, dag, get_current_context, task

from outreach.airflow import defaults, tasks_common, tasks_health, tasks_inbox


@dag(
    dag_id="outreach_inbox",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule="*/10 * * * *", retries=1, max_active_runs=1),
)
def outreach_inbox():
    @task
    def targets() -> list[dict]:
        return tasks_inbox.inbox_targets_task()

    @task(map_index_template="{{ inbox_label }}")
    def read(target: dict) -> dict:
        get_current_context()["inbox_label"] = target["label"]
        return tasks_inbox.inbox_read_task(target)

    @task(trigger_rule=TriggerRule.NONE_FAILED)
    def summary(results) -> dict:
        return tasks_inbox.inbox_summary_task(list(results) if results is not None else [])

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def rates() -> list:
        return tasks_health.bounce_rate_task() + tasks_health.complaint_rate_task()

    @task(trigger_rule=TriggerRule.ALL_DONE, outlets=[defaults.events_alias("inbox")])
    def announce(**context) -> dict:
        return tasks_common.announce_events_task("inbox", context["outlet_events"])

    reads = read.expand(target=targets())
    summary(reads)
    reads >> rates()
    reads >> announce()


outreach_inbox()
