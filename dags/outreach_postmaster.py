"""
### outreach_postmaster

Daily mailbox health: Google Postmaster Tools figures, and our own hard-bounce and complaint rates.

* **fetch_postmaster** reads Postmaster Tools API v2 for every sending domain (the mailboxes'
  From domains) with the service account of the Airflow connection `outreach_postmaster`:
  `SPAM_RATE`, `FEEDBACK_LOOP_SPAM_RATE` per mailbox (Feedback-ID field `m<id>`) for the last
  14 days, and the compliance status. One row per domain / metric / day is upserted; a day
  without data is stored as unknown, never as 0 %.
* **pause_on_spam_rate** pauses every mailbox whose domain's or feedback loop's latest known spam
  rate is above 0.1 % (`OUTREACH_SPAM_RATE_THRESHOLD`), with the figure and its date as the
  reason, by `postmaster`.
* **pause_on_bounce_rate** (independent of Postmaster) pauses every mailbox whose hard-bounce rate
  over 28 days is above 3 % after at least 20 sends, by `bounce-rate`.
* **pause_on_complaint_rate** pauses every mailbox whose feedback-loop complaint rate (ARF reports
  read by `outreach_inbox`) over the same sends is above 0.1 % (`OUTREACH_COMPLAINT_RATE_THRESHOLD`),
  by `complaint-rate`. `outreach_inbox` runs this rule and the bounce rule after every read too.

Only an operator resumes (`outreach_mailbox_resume`). **Clearing any task is safe**: upserts, and
a pause only changes an active mailbox.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults, tasks_health


@dag(
    dag_id="outreach_postmaster",
    doc_md=__doc__,
    # Daily at 07:00 UTC: Postmaster data lags 1–2 days anyway.
    **defaults.dag_kwargs(schedule="0 7 * * *", retries=2, max_active_runs=1),
)
def outreach_postmaster():
    @task
    def fetch_postmaster() -> dict:
        return tasks_health.postmaster_fetch_task()

    @task
    def pause_on_spam_rate() -> list:
        return tasks_health.spam_rate_task()

    @task
    def pause_on_bounce_rate() -> list:
        return tasks_health.bounce_rate_task()

    @task
    def pause_on_complaint_rate() -> list:
        return tasks_health.complaint_rate_task()

    fetch_postmaster() >> pause_on_spam_rate()
    pause_on_bounce_rate()
    pause_on_complaint_rate()


outreach_postmaster()
