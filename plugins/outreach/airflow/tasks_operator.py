"""Task bodies of the manual operator DAGs with trigger forms: mailbox and campaign pause and
resume, lead stop and erasure, the campaign test send, suppress and unsuppress, requeue, and
the daily report (see :mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.connections import (
    database_url,
    dkim_private_key,
    settings,
    smtp_connector,
)
from outreach.airflow.who import airflow_who
from outreach.logutil import log, mask


def pause_task(mailbox: str, reason: str, by: str) -> dict[str, Any]:
    """Pause a mailbox (id or address) for an operator; return what changed."""
    from outreach.mailboxes import pause_mailbox

    change = pause_mailbox(database_url(), mailbox, reason, by, who=airflow_who(by))  # logs it
    return {"mailbox_id": change.mailbox_id, "changed": change.changed, "status": change.status}


def resume_task(mailbox: str, by: str, why: str) -> dict[str, Any]:
    """Resume a mailbox (id or address) for an operator; return what changed."""
    from outreach.mailboxes import resume_mailbox

    change = resume_mailbox(database_url(), mailbox, by, why, who=airflow_who(by))  # logs it
    return {"mailbox_id": change.mailbox_id, "changed": change.changed, "status": change.status}


def lead_stop_task(address: str, campaign: str, reason: str, by: str) -> dict[str, Any]:
    """Stop a lead's enrolment in a campaign for an operator; return what changed (address
    masked). See :func:`outreach.enrollments.stop_lead`."""
    from outreach.enrollments import stop_lead

    result = stop_lead(database_url(), address, campaign, reason, by,
                       who=airflow_who(by))  # logs the change
    return {"enrollment_id": result.enrollment_id, "address": result.address,
            "changed": result.changed, "status": result.status, "cancelled": result.cancelled}


def lead_erase_task(address: str, reason: str, by: str) -> dict[str, Any]:
    """Erase a person for an admin (:func:`outreach.erasure.erase`); return the erasure's id
    and counts per table (address masked). Logs one line.

    :raises outreach.erasure.ErasureError: no key, a reason naming the person, or an email to
        the person being sent right now (the task's retry runs it again).
    """
    from outreach.erasure import erase

    result = erase(database_url(), address, actor=by, reason=reason, who=airflow_who(by))
    return {"erasure_id": result.erasure_id, "address": result.address, "counts": result.counts}


def campaign_pause_task(campaign: str, reason: str, by: str) -> dict[str, Any]:
    """Pause a campaign (key) for an operator; return what changed."""
    from outreach.campaign_pause import pause_campaign

    change = pause_campaign(database_url(), campaign, reason, by, who=airflow_who(by))  # logs it
    return {"campaign": change.campaign, "changed": change.changed, "status": change.status}


def campaign_resume_task(campaign: str, by: str, why: str) -> dict[str, Any]:
    """Resume a paused campaign (key) for an operator; return what changed."""
    from outreach.campaign_pause import resume_campaign

    change = resume_campaign(database_url(), campaign, by, why, who=airflow_who(by))  # logs it
    return {"campaign": change.campaign, "changed": change.changed, "status": change.status}


def campaign_test_send_task(campaign: str, to: list[str], by: str, *, lead: str | None = None,
                            step: int = 1) -> list[dict[str, Any]]:
    """Send a step of a campaign to seed addresses (:func:`outreach.testsend.send_to_seeds`);
    return one ``{recipient (masked), sent, message_id, reply}`` per seed.

    :raises RuntimeError: a seed was not accepted (the task fails; the message names them,
        masked).
    """
    from dataclasses import asdict

    from outreach.testsend import send_to_seeds

    results = send_to_seeds(database_url(), campaign, to, settings(), smtp_connector, actor=by,
                            lead=lead, step=step, dkim_keys=dkim_private_key)
    for r in results:
        log.info("test send step %s to %s: %s", step, mask(r.recipient),
                 f"sent, Message-ID <{r.message_id}>" if r.sent else f"NOT sent: {r.reply}")
    failed = [r for r in results if not r.sent]
    if failed:
        raise RuntimeError("test send: not sent to " + "; ".join(
            f"{mask(r.recipient)} ({r.reply})" for r in failed))
    return [{**asdict(r), "recipient": mask(r.recipient)} for r in results]  # XCom is logged


def requeue_task(failure_kind: str, requested_by: str, reason: str, email_ids: list[int] | None,
                 campaign_key: str | None, mailbox: str | None) -> dict[str, Any]:
    """Requeue emails that failed without being accepted (see
    :func:`outreach.resolve.requeue_failed`); return the ids requeued and skipped (with why)."""
    from outreach.resolve import requeue_failed

    result = requeue_failed(database_url(), failure_kind, requested_by, reason, ids=email_ids,
                            campaign_key=campaign_key, mailbox=mailbox,
                            who=airflow_who(requested_by))
    return {"failure_kind": failure_kind, "requeued": result.requeued,
            "skipped": {str(k): v for k, v in result.skipped.items()}}


def report_task() -> dict[str, Any]:
    """Print the campaign report (text tables) to the task log; return its totals."""
    from outreach.report import collect, render_text

    report = collect(database_url())
    for line in render_text(report).splitlines():
        log.info(line)
    return report["totals"] or {}


def suppress_task(value: str, reason: str, requested_by: str) -> dict[str, Any]:
    """Suppress an address or domain and cancel its queued steps, in one transaction."""
    from outreach import db
    from outreach.suppression import suppress

    with db.transaction(database_url()) as conn:
        added, cancelled = suppress(conn, value, reason, f"operator:{requested_by}",
                                    actor=requested_by, who=airflow_who(requested_by))
    log.info("suppress %s (%s) by %s: %s; cancelled %s queued email(s)", mask(value), reason,
             requested_by, "added" if added else "already suppressed", cancelled)
    return {"added": added, "cancelled": cancelled}


def unsuppress_task(value: str, requested_by: str, why: str) -> dict[str, Any]:
    """Remove the active suppression of an address or domain, recording who and why."""
    from outreach import db
    from outreach.suppression import unsuppress

    with db.transaction(database_url()) as conn:
        result = unsuppress(conn, value, actor=requested_by, note=why,
                            who=airflow_who(requested_by))
    log.info("unsuppress %s by %s (%s): removed=%s (was %s) still_suppressed=%s", mask(value),
             requested_by, why, result.removed, result.reason, result.still_suppressed)
    return {"value": mask(value), "removed": result.removed, "reason": result.reason,
            "still_suppressed": result.still_suppressed}
