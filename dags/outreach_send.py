"""
### outreach_send

Sends queued emails: **plan** (the preflight, then the plan) → one mapped **send_batch** per
batch → **summary** and **after_send**. Three tasks a run besides the sends: each task costs a
process start and a DAG parse.

* **plan** first runs the preflight: it checks each active mailbox's sending domain in DNS
  (SPF, DKIM, DMARC, alignment, MX, PTR; see `outreach preflight`) and asks each relay what it
  can carry; its result lines (`preflight: …`) come first in the plan's log.
  `OUTREACH_PREFLIGHT` decides what a FAIL does: `warn` (default) logs it, `block` keeps that
  domain's mailboxes out of this run's plan, `off` skips the checks. A FAIL raises an alert
  (once per domain and day).
  Then it takes back stale `sending` rows (unconfirmed if their handoff was stamped, else back
  in the queue) and gives each active mailbox its work for this run — what it may still send
  today (daily cap, warm-up), the day spread evenly over today's full send window and never more
  than its steady rate a run (pacing, `OUTREACH_SEND_INTERVAL_MINUTES`, 10 like this schedule;
  the rule: `mailbox_remaining_today` in sql/queries/mailboxes.sql) — and splits it over at most
  `OUTREACH_SEND_PARALLELISM` (4 by default; `make airflow` sets the sizing rule's) batches
  of at most `OUTREACH_BATCH_SIZE` rows, each across mailboxes. A mailbox blocked by the
  preflight that had rows due gets a batch of its own that **fails** with what to fix. Nothing
  due: `send_batch` is skipped (the plan's log says why).
* **send_batch** claims its own rows mailbox by mailbox (the mailbox's lock, its remaining quota
  and run share, then the claim function `outreach.claim_emails_v4`: `FOR NO KEY UPDATE SKIP
  LOCKED` with a fresh claim token), re-checks suppression
  right before the handoff, sends over one SMTP session per mailbox and commits each row's
  outcome right after its handoff. It logs one summary line per mailbox. Paused mailboxes are
  never claimed. Each runs in the Airflow pool `outreach_smtp` (one slot = one SMTP session at a
  time), whose size bounds concurrent SMTP sessions across every worker. With
  `OUTREACH_SEND_SESSIONS_PER_TASK` N above 1 (the sizing rule sets it: about one send task per
  worker a run), each task carries N of the plan's batches and sends them at once, one SMTP session and
  one thread each, holding N pool slots; a session that fails stops the task's others before
  their next row, what they had not handed over back in the queue. Its label says what it
  did, per mailbox by name (`anna — sales: sent 12, unconfirmed 1`). It **fails** when rows were
  left unconfirmed (they need a person) or a mailbox could not be reached: a red `send_batch`
  whose log says `MailboxUnreachable` is a mailbox whose SMTP connection, login or DKIM key
  failed before any of its rows was handed over (the line names the Airflow connection and the
  reply): its rows are back in the queue with no attempt counted, the batch's other mailboxes
  were sent. Fix the connection; the next run (or clearing) sends. The first failed try of any
  task raises one alert for the run (within a minute, before the retries).
* **summary** reads what the run did from the ledger (every row its tasks claimed, cleared tries
  included) and fails when the plan or a send task failed.
  It is the task that turns the run red: a run's state follows its leaves.
* **after_send** runs whatever the sends did, and succeeds even when they failed (so its asset
  events are recorded): it alerts once about unconfirmed emails never alerted before and, while
  any is not listed by a Required Action yet, updates the asset `outreach_unconfirmed` that
  opens one (`outreach_unconfirmed_review`; through the alias `outreach_unconfirmed_flag`, so
  no asset event when there is nothing to review); then it updates the event Assets
  `outreach://events/sent` and `outreach://events/unconfirmed` with the id range of the new
  events (none: no asset event).

**Clearing is safe.** A cleared or retried `send_batch` claims fresh rows or none: what its
earlier try sent is `sent`, and rows it left `sending` (a killed worker) go to the reaper: the row
whose handoff was stamped becomes *unconfirmed* — never resent automatically — and the rows never
handed over go back to the queue. Overlapping runs are safe for the same reason.
"""

from __future__ import annotations

from airflow.sdk import TriggerRule, dag, get_current_context, task

from outreach.airflow import alerts, defaults, tasks_send


@dag(
    dag_id="outreach_send",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule="*/10 * * * *", retries=2, max_active_runs=2,
                          on_failure_callback=alerts.RunFailedNotifier(),
                          on_retry_callback=alerts.RunFailedNotifier(retrying=True)),
)
def outreach_send():
    @task
    def plan() -> list[dict]:
        return tasks_send.preflight_and_plan_task()

    @task(map_index_template="{{ batch_label }}", pool=defaults.SMTP_POOL,
          pool_slots=defaults.send_sessions_per_task())
    def send_batch(batch: dict) -> dict:
        # The task's own context (not a copy): the label set in it is what the UI shows.
        return tasks_send.send_task(batch, get_current_context())

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def summary(batches, results, **context) -> dict:
        # None: the plan failed (summary then fails the run); []: nothing was due.
        planned = None if batches is None else list(batches)
        return tasks_send.summary_task(planned, list(results or []),
                                       context["dag"].dag_id, context["run_id"])

    @task(trigger_rule=TriggerRule.ALL_DONE,
          outlets=[defaults.unconfirmed_alias(), defaults.events_alias("send")])
    def after_send(**context) -> dict:
        return tasks_send.after_send_task(context["outlet_events"])

    batches = plan()
    sent = send_batch.expand(batch=batches)
    summary(batches, sent)
    sent >> after_send()


outreach_send()
