"""
### outreach_import_leads

Imports a leads CSV (HubSpot, Salesforce, Apollo… exports) into a campaign, after an optional
do-not-contact list.

* **import_leads** syncs the campaign file and mailbox file, imports the do-not-contact list, then
  the leads: bad rows are logged by line number and reason, the good rows are imported, suppressed
  addresses are not stored. Everything is one transaction per file. Both CSV paths are relative
  to the project root and must lie inside an `OUTREACH_IMPORT_ROOTS` folder (default
  `include/data`): any other path fails the task unread. When leads were imported it updates
  the campaign's leads Asset (`outreach://leads/<campaign>`), so `outreach_queue_due` queues
  them right away instead of at its next quarter hour.

**Clearing `import_leads` is safe**: the same files imported again change nothing (leads are
unique by normalised address, enrolments by campaign and lead, suppressions by value).
"""

from __future__ import annotations

from airflow.sdk import Param, dag, get_current_context, task

from outreach.airflow import defaults, tasks_import


@dag(
    dag_id="outreach_import_leads",
    doc_md=__doc__,
    **defaults.dag_kwargs(),
    params={
        "campaign_file": Param("include/campaigns/demo.yaml", type="string", title="Campaign file",
                               description="Campaign YAML, relative to the project root.",
                               examples=defaults.project_files("include/campaigns", "*.yaml")),
        "mailbox_file": Param("include/mailboxes.yaml", type="string", title="Mailbox file"),
        "leads_file": Param("include/data/sample_leads.csv", type="string", title="Leads CSV",
                            description="A CRM or prospecting export (UTF-8, header row), "
                            "inside OUTREACH_IMPORT_ROOTS (default include/data).",
                            examples=defaults.project_files("include/data", "*.csv")),
        "suppressions_file": Param("include/data/do_not_contact.csv", type=["null", "string"],
                                   title="Do-not-contact CSV (optional)"),
    },
)
def outreach_import_leads():
    @task(outlets=[defaults.leads_alias()])
    def import_leads() -> dict:
        context = get_current_context()
        p = context["params"]
        out = tasks_import.import_task(p["campaign_file"], p["mailbox_file"], p["leads_file"],
                                       p.get("suppressions_file"))
        tasks_import.announce_leads(context["outlet_events"], out)
        return out

    import_leads()


outreach_import_leads()
