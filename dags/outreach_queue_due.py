"""
### outreach_queue_due

Queues the due sequence step of every enrolled lead, every 15 minutes — and, when campaigns
declare a `source:`, as soon as an import updated a campaign's leads Asset
(`outreach://leads/<campaign>`, see `outreach_import_sources`).

* **queue_due** first fails rows left `sending` for over the reaper threshold (default 30 minutes)
  as *unconfirmed* ("check Sent Items before doing anything"), then inserts, in one statement
  per part of the leads (`OUTREACH_QUEUE_DUE_WORKERS`, default one part), step 1 for new
  enrolments and step n for leads whose step n-1 was sent long enough ago. Suppressed addresses
  are skipped. A part that fails is rolled back alone, the others commit: the log has one line
  per failed part and one saying what the others queued.
  Last, a campaign whose enrolments are all done and that has nothing queued, sending or
  unconfirmed becomes `finished` (one guarded UPDATE, `outreach.finish_campaigns_v1`; not a
  campaign fed by a `source:`); the log names it.
* **mx_providers** then looks up the MX records of the recipient domains of queued rows whose
  cached mailbox provider is missing or about to expire, for the provider cap
  (`OUTREACH_PROVIDER_HOURLY`; docs/explanation/contact-policy.md). A failed lookup keeps the
  old entry and is tried again next run; the claim never looks anything up.

**Clearing `queue_due` is safe**: a row per (lead, sequence step) is enforced by a UNIQUE
constraint, so a second run queues nothing twice.
"""

from __future__ import annotations

from airflow.sdk import dag, task

from outreach.airflow import defaults, tasks_send


@dag(
    dag_id="outreach_queue_due",
    doc_md=__doc__,
    **defaults.dag_kwargs(schedule=defaults.queue_due_schedule(), retries=2,
                          max_active_runs=1),
)
def outreach_queue_due():
    @task
    def queue_due() -> dict:
        return tasks_send.queue_task()

    @task
    def mx_providers() -> dict:
        return tasks_send.mx_providers_task()

    queue_due() >> mx_providers()


outreach_queue_due()
