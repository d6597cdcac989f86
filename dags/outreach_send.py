"""
### outreach_send

Sends queued emails: preflight → plan → one mapped **send_batch** per batch → summary.

* **preflight** checks each active mailbox's sending domain in DNS (SPF, DKIM, DMARC, alignment,
  MX, PTR; see `outreach preflight`). `OUTREACH_PREFLIGHT` decides what a FAIL does: `warn`
  (default) logs it, `block` keeps that domain's mailboxes out of this run's plan, `off` skips the
  checks.
* **plan** takes back stale `sending` rows (unconfirmed if their handoff was stamped, else back
  in the queue), then gives each active mailbox its work for this run — what it may still send
  today (daily cap, warm-up), the day spread evenly over today's full send window and never more
  than its steady rate a run (pacing, `OUTREACH_SEND_INTERVAL_MINUTES`, 10 like this schedule;
  the rule: `mailbox_remaining_today` in sql/queries/emails.sql) — and splits it over at most
  `OUTREACH_SEND_PARALLELISM` (4) batches
  of at most `OUTREACH_BATCH_SIZE` rows, each across mailboxes.
* **send_batch** claims its own rows mailbox by mailbox (the mailbox's lock, its remaining quota
  and run share, then `FOR UPDATE SKIP LOCKED` with a fresh claim token), re-checks suppression
  right before the handoff, sends over one SMTP session per mailbox and commits each row's
  outcome right after its handoff. It logs one summary line per mailbox. Paused mailboxes are
  never claimed. Each runs in the Airflow pool `outreach_smtp` (one slot = one SMTP session at a
  time), whose size bounds concurrent SMTP sessions across every worker. **A red `send_batch`** whose log says `MailboxUnreachable` is a mailbox whose SMTP
  connection, login or DKIM key failed before any of its rows was handed over (the line names
  the Airflow connection and the reply): its rows are back in the queue with no attempt counted,
  the batch's other mailboxes were sent. Fix the connection; the next run (or clearing) sends.
* **summary** adds up the batches.

**Clearing is safe.** A cleared or retried `send_batch` claims fresh rows or none: what its
earlier try sent is `sent`, and rows it left `sending` (a killed worker) go to the reaper: the row
whose handoff was stamped becomes *unconfirmed* — never resent automatically — and the rows never
handed over go back to the queue. Overlapping runs are safe for the same reason.
"""

from __future__ import annotations

from airflow.sdk import TriggerRule, dag, get_current_context, task

from outreach import airflow_adapter


@dag(
    dag_id="outreach_send",
    doc_md=__doc__,
    **airflow_adapter.dag_kwargs(schedule="*/10 * * * *", retries=2, max_active_runs=2),
)
def outreach_send():
    @task
    def preflight() -> dict:
        return airflow_adapter.preflight_task()

    @task
    def plan(checked: dict) -> list[dict]:
        return airflow_adapter.plan_task(checked)

    @task(map_index_template="{{ batch_label }}", pool=airflow_adapter.SMTP_POOL)
    def send_batch(batch: dict) -> dict:
        ctx = get_current_context()
        ctx["batch_label"] = batch["label"]
        ti = ctx["ti"]
        worker = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}[{ti.map_index}]#try{ti.try_number}"
        return airflow_adapter.send_task(batch, worker)

    @task(trigger_rule=TriggerRule.NONE_FAILED)
    def summary(results) -> dict:
        return airflow_adapter.summary_task(list(results) if results is not None else [])

    summary(send_batch.expand(batch=plan(preflight())))


outreach_send()
