"""Task bodies of ``outreach_campaign_approval``: collect what a reviewer decides on, then record
the decision (see :mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.connections import (
    database_url,
    settings,
)
from outreach.airflow.tasks_send import _expected_dkim, preflight_mode
from outreach.logutil import log

APPROVE, REJECT = "approve", "reject"
"""The launch approval's answers (``decide`` in ``outreach_campaign_approval``)."""


def approval_preflight(mailboxes: list[dict[str, Any]]) -> dict[str, str]:
    """Return the DNS preflight per sending domain of ``mailboxes``, as the send DAG's preflight checks
    it: ``PASS``, ``WARN: checks``, ``FAIL: checks`` or ``not checked (…)``; no alert here."""
    from outreach.preflight import make_resolver, run_preflight
    from outreach.settings import PreflightSettings

    if preflight_mode() == "off":
        return {m["domain"]: "not checked (OUTREACH_PREFLIGHT=off)" for m in mailboxes}
    checks = PreflightSettings()
    resolver = make_resolver(checks.dns_nameserver)
    out: dict[str, str] = {}
    for m in mailboxes:
        report = run_preflight(m["domain"], selector=m["dkim_selector"],
                               sending_ip=checks.sending_ip, dkim_public_key=_expected_dkim(m),
                               resolver=resolver)
        failed = [c.name for c in report.checks if c.status == "FAIL"]
        warned = [c.name for c in report.checks if c.status == "WARN"]
        verdict = (f"FAIL: {', '.join(failed)}" if failed else
                   f"WARN: {', '.join(warned)}" if warned else "PASS")
        # The worst result of the domain's mailboxes (another selector may fail).
        order = ("PASS", "WARN", "FAIL")
        if m["domain"] not in out or order.index(verdict[:4]) > order.index(out[m["domain"]][:4]):
            out[m["domain"]] = verdict
    return out


def approval_collect_task(run_id: str, campaign: str | None = None) -> dict[str, Any]:
    """Pick the campaign of this run's Required Action and :func:`outreach.approval.gather` it.

    ``campaign`` (the form's Param), else the oldest awaiting approval whose latest submission no
    Required Action listed (key ``approval:<submitted event id>``).

    :returns: ``{"campaign", "content_version", "subject", "body"}`` (``body``: Markdown).
    :raises airflow.sdk.exceptions.AirflowSkipException: nothing awaits approval."""
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach import db
    from outreach.approval import awaiting, gather, markdown
    from outreach.store import alerts as alerts_store

    url = database_url()
    chosen = None
    for c in awaiting(url, campaign):
        if campaign:
            chosen = c
            break
        with db.transaction(url) as conn:
            if alerts_store.alert_claim_many(
                    conn, event_keys=[f"approval:{c['submitted_event_id']}"],
                    kind="required_action", subject=f"Required Action {run_id}", body=""):
                chosen = c
                break
    if chosen is None:
        raise AirflowSkipException(
            f"campaign {campaign} is not awaiting approval" if campaign else
            "no campaign awaiting approval that a Required Action has not listed")
    facts = gather(url, chosen, settings(), preflight=approval_preflight)
    log.info("Required Action: approval of campaign %s (campaign content version %s): %s "
             "lead(s) to be contacted, skipped %s", chosen["key"], chosen["content_version"],
             facts["to_contact"], facts["skipped"])
    return {"campaign": chosen["key"], "content_version": chosen["content_version"],
            "subject": f"Launch campaign {chosen['key']}? {facts['to_contact']} lead(s)",
            "body": markdown(facts)}


def approval_record_task(collected: dict[str, Any], response: dict[str, Any], dag_id: str,
                         run_id: str) -> dict[str, Any]:
    """Apply the answer (:func:`outreach.campaign_pause.change_status`): *approve* by the Airflow user,
    at their time, only for the content version shown; *reject* to draft with their reason.

    :param collected: :func:`approval_collect_task`'s result.
    :param response: the HITL result: ``chosen_options``, ``params_input``, ``responded_by_user``,
        ``responded_at``.
    :raises airflow.sdk.exceptions.AirflowFailException: no user or option, or the content changed
        (the new submission gets its own Required Action)."""
    import datetime as dt

    from airflow.sdk.exceptions import AirflowFailException

    from outreach.campaign_pause import CampaignStateError, change_status

    chosen = (response or {}).get("chosen_options") or []
    user = (response or {}).get("responded_by_user") or {}
    if len(chosen) != 1 or chosen[0] not in (APPROVE, REJECT) or not user.get("name"):
        raise AirflowFailException(f"the Required Action's answer is unusable: options {chosen}, "
                                   f"user {user.get('name')!r}")
    at = response.get("responded_at")
    if isinstance(at, str):
        at = dt.datetime.fromisoformat(at)
    typed = " ".join(str(((response.get("params_input") or {}).get("reason")) or "").split())
    where = f"Required Action {dag_id}/{run_id} (Airflow user id {user.get('id')})"
    try:
        if chosen[0] == APPROVE:
            change = change_status(database_url(), collected["campaign"], "approve", user["name"],
                                   typed or f"approved in {where}", now=at,
                                   content_version=collected["content_version"])
        else:
            change = change_status(database_url(), collected["campaign"], "reject", user["name"],
                                   typed or f"rejected in {where} (no reason typed)", now=at)
    except CampaignStateError as exc:
        raise AirflowFailException(str(exc)) from exc
    return {"campaign": change.campaign, "changed": change.changed, "status": change.status,
            "by": user["name"]}
