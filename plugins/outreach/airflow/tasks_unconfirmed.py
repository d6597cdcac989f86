"""Task bodies for unconfirmed emails: the send DAG's flag, the ``outreach_unconfirmed_review``
Required Action, and ``outreach_resolve_unconfirmed`` (evidence, resolve; see
:mod:`outreach.airflow.tasks_common` for what a task body may do).
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.alerts import (
    alert,
)
from outreach.airflow.connections import (
    database_url,
    imap_account,
)
from outreach.airflow.defaults import REVIEW_OPTIONS
from outreach.airflow.who import airflow_who
from outreach.logutil import log


def parse_ids(text: str | list[int] | None) -> list[int]:
    """Parse email ids typed as one comma-separated text (``"288, 290"``); ``[]`` when empty.

    :raises ValueError: a part is not a whole number (named).
    """
    if isinstance(text, list):
        return [int(i) for i in text]
    ids = []
    for part in (text or "").replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise ValueError(f"email_ids: {part!r} is not an email id (whole numbers, "
                             "comma-separated, e.g. 288, 290)")
        ids.append(int(part))
    return ids


def _checked_ids(url: str, email_ids: str | list[int] | None) -> list[int]:
    """Parse the form's ids and check that each is an unconfirmed email.

    :raises airflow.sdk.exceptions.AirflowFailException: a malformed id, or ids that are not
        unconfirmed emails (listed).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.resolve import list_unconfirmed

    try:
        ids = parse_ids(email_ids)
    except ValueError as exc:
        raise AirflowFailException(str(exc)) from None
    if ids:
        found = {r["id"] for r in list_unconfirmed(url, ids=ids)}
        unknown = [i for i in ids if i not in found]
        if unknown:
            raise AirflowFailException(f"email_ids: not unconfirmed emails: {unknown} (see "
                                       "outreach unconfirmed); nothing was resolved")
    return ids


def evidence_task(email_ids: str | list[int] | None, campaign_key: str | None,
                  mailbox: str | None) -> list[dict[str, Any]]:
    """Log each selected unconfirmed email (:func:`outreach.resolve.describe_unconfirmed`, with
    a late acceptance if any), its Message-ID and what its mailbox's Sent folder says
    (:func:`outreach.resolve.sent_evidence`); return ``[{email_id, message_id, evidence, found}]``.

    :param email_ids: comma-separated ids (:func:`parse_ids`), checked like :func:`resolve_task`.
    """
    from outreach.resolve import describe_unconfirmed, list_unconfirmed, row_message_id, sent_evidence

    url = database_url()
    rows = list_unconfirmed(url, ids=_checked_ids(url, email_ids) or None,
                            campaign_key=campaign_key, mailbox=mailbox)
    sent = sent_evidence(rows, imap_account)
    out = []
    for r in rows:
        out.append({"email_id": r["id"], "message_id": row_message_id(r),
                    "evidence": sent[r["id"]].text(), "found": sent[r["id"]].state == "found"})
        log.info("unconfirmed: %s", describe_unconfirmed(r))
        log.info("    Message-ID <%s>: %s", out[-1]["message_id"], out[-1]["evidence"])
    log.info("%s unconfirmed email(s), %s found in a Sent folder", len(out),
             sum(o["found"] for o in out))
    return out


def resolve_task(decision: str, resolved_by: str, email_ids: str | list[int] | None,
                 campaign_key: str | None, mailbox: str | None, note: str) -> dict[str, Any]:
    """Resolve unconfirmed emails (:mod:`outreach.resolve`); return the ids resolved and skipped.

    :param decision: ``was_sent``, ``not_sent`` or ``was_sent_if_found`` (those found in their
        Sent folder, :func:`outreach.resolve.resolve_found`); no default.
    :param email_ids: comma-separated ids (:func:`parse_ids`), or empty to select by campaign
        and/or mailbox.
    :raises airflow.sdk.exceptions.AirflowFailException: no decision, a bad or not unconfirmed id
        (nothing resolved), no selection, or nothing was resolved."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.resolve import DECISIONS, resolve, resolve_found

    if decision not in (*DECISIONS, "was_sent_if_found"):
        raise AirflowFailException(f"decision: choose one of {[*DECISIONS, 'was_sent_if_found']} "
                                   "(there is no default)")
    url = database_url()
    ids = _checked_ids(url, email_ids)
    try:
        if decision == "was_sent_if_found":
            if ids:
                raise ValueError("was_sent_if_found selects by campaign and/or mailbox, not by ids")
            result = resolve_found(url, resolved_by, imap_account, campaign_key=campaign_key,
                                   mailbox=mailbox, who=airflow_who(resolved_by))
        else:
            result = resolve(url, decision, resolved_by, ids=ids or None,
                             campaign_key=campaign_key, mailbox=mailbox, note=note,
                             who=airflow_who(resolved_by))
    except ValueError as exc:
        raise AirflowFailException(str(exc)) from None
    if not result.resolved:
        raise AirflowFailException(f"nothing was resolved: no unconfirmed email matches "
                                   f"(ids {ids or '-'}, campaign {campaign_key or '-'}, mailbox "
                                   f"{mailbox or '-'}; skipped {result.skipped})")
    return {"decision": decision, "resolved": result.resolved, "skipped": result.skipped}


REVIEW_DECISIONS = {"was sent": "was_sent", "not sent, requeue": "not_sent"}


def _review_text(rows: list[dict[str, Any]]) -> str:
    """The Required Action's body (Markdown): one table row per email, cells made inert. The
    Sent-folder evidence is the second column (what was checked, :meth:`SentEvidence.text`), so
    it is on screen next to the answers; Message-IDs are code spans (never ``mailto:`` links)."""
    from outreach.approval import md_cell as cell
    from outreach.approval import md_code as code

    lines = ["Check each mailbox's **Sent Items** (or the provider's logs) for these Message-IDs "
             "before answering. *was sent* records them as sent by you; *not sent, requeue* sends "
             "them again with the same Message-ID (it asks you to confirm); *leave for later* "
             "changes nothing.", "",
             "| id | Sent-folder evidence | campaign | step | recipient | mailbox | Message-ID | "
             "handed over | stage | reply |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [cell(r["id"]), cell(r["evidence"]), cell(r["campaign"]), cell(r["step"]),
                 cell(r["recipient"]), cell(r["mailbox"]), code(r["message_id"]),
                 cell(r["handed_over_at"] or r["claimed_at"]), cell(r["stage"]), cell(r["error"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def review_confirm_text(collected: dict[str, Any]) -> dict[str, str]:
    """Return the confirmation step's ``subject`` and ``body`` (Markdown) for a *not sent,
    requeue* answer: what the answer does, and the same table with the evidence.

    :param collected: :func:`review_collect_task`'s result.
    """
    n = len(collected["ids"])
    return {"subject": f"Confirm: send {n} email(s) again?",
            "body": (f"**{REQUEUE_CONFIRM}** puts these {n} email(s) back in the queue: the next "
                     "send run hands them over again (same Message-ID). If a message *was* "
                     "delivered, its recipient gets it twice. Read the Sent-folder evidence "
                     "below first; *not checked* means nobody looked.\n\n"
                     + collected["body"].split("\n\n", 1)[-1])}


REQUEUE_CONFIRM = "yes, send them again"
REQUEUE_CANCEL = "no, leave them for later"
CONFIRM_OPTIONS = (REQUEUE_CONFIRM, REQUEUE_CANCEL)
"""The confirmation step's answers (``confirm_requeue`` in ``outreach_unconfirmed_review``)."""


def flag_unconfirmed_task() -> dict[str, Any]:
    """Alert once about unconfirmed emails never alerted (keys ``unconfirmed:<id>``) and return
    those not listed by a Required Action yet (``review:<id>``); while there are any, the send
    DAG's ``after_send`` updates the unconfirmed asset (:func:`outreach.airflow.tasks_send.after_send_task`).

    The second condition catches up a review missed while its DAG was paused (Airflow queues asset
    events only for unpaused DAGs; the database remembers what was listed).

    :returns: ``{"new": ids alerted now, "unlisted": ids no Required Action listed yet}``
        (``unlisted`` empty: nothing to review, no asset event)."""
    from outreach import db
    from outreach.resolve import unconfirmed_details
    from outreach.store import alerts as alerts_store

    url = database_url()
    rows = {r["id"]: r for r in unconfirmed_details(url)}
    new = alert("unconfirmed", [f"unconfirmed:{i}" for i in rows], lambda keys: (
        f"outreach: {len(keys)} new unconfirmed email(s): check Sent Items",
        "These emails may or may not have gone out (the end of DATA got no reply). Check the "
        "mailboxes' Sent Items, then answer the Required Action in Airflow "
        "(outreach_unconfirmed_review) or run outreach resolve.\n\n" + "\n".join(
            f"email {r['id']}: {r['campaign']} step {r['step']}, to {r['recipient']} from "
            f"{r['mailbox']}, Message-ID {r['message_id']}, {r['stage']}"
            for r in (rows[int(k.split(':')[1])] for k in keys))), url)
    with db.connect(url, autocommit=True) as conn:
        unlisted = [int(k.split(":")[1]) for k in alerts_store.alert_keys_absent(
            conn, event_keys=[f"review:{i}" for i in rows])]
    if unlisted:
        log.info("unconfirmed emails for a Required Action: %s (alerted now: %s)", unlisted,
                 [int(k.split(":")[1]) for k in new])
    else:
        log.info("no unconfirmed emails that a Required Action has not listed")
    return {"new": [int(k.split(":")[1]) for k in new], "unlisted": unlisted}


def review_collect_task(run_id: str) -> dict[str, Any]:
    """List the unconfirmed emails no Required Action listed yet (each is listed once: keys
    ``review:<email id>`` in ``outreach.alerts``) for this run's Required Action.

    :returns: ``{"ids": [...], "body": markdown, "subject": str, "confirm_subject": str,
        "confirm_body": markdown}`` (the last two: the confirmation step's, :func:`review_confirm_text`).
    :raises airflow.sdk.exceptions.AirflowSkipException: nothing new to review.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach import db
    from outreach.resolve import unconfirmed_details
    from outreach.store import alerts as alerts_store

    url = database_url()
    # With the Sent-folder search (IMAP) where the mailbox has an account: the person deciding
    # sees whether the message is in the mailbox's Sent folder.
    rows = {r["id"]: r for r in unconfirmed_details(url, accounts=imap_account)}
    with db.transaction(url) as conn:
        new = [int(key.split(":")[1]) for key in alerts_store.alert_claim_many(
            conn, event_keys=[f"review:{i}" for i in rows], kind="required_action",
            subject=f"Required Action {run_id}", body="")]
    if not new:
        raise AirflowSkipException("no unconfirmed emails that a Required Action has not listed")
    listed = [rows[i] for i in new]
    log.info("Required Action for %s unconfirmed email(s): ids %s", len(new), new)
    for r in listed:
        log.info("  email %s, Message-ID <%s>: %s", r["id"], r["message_id"], r["evidence"])
    out = {"ids": new, "subject": f"{len(new)} unconfirmed email(s): were they sent?",
           "body": _review_text(listed)}
    confirm = review_confirm_text(out)
    return {**out, "confirm_subject": confirm["subject"], "confirm_body": confirm["body"]}


def review_record_task(collected: dict[str, Any], response: dict[str, Any], dag_id: str,
                       run_id: str, confirmation: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record the Required Action's answer for exactly the listed emails, by the Airflow user who
    answered (:func:`outreach.resolve.resolve`).

    :param collected: :func:`review_collect_task`'s result (the listed ids).
    :param response: the HITL result: ``chosen_options``, ``responded_by_user`` (``{"id", "name"}``).
    :param confirmation: the confirmation step's result (``None``: skipped); *not sent, requeue* is
        applied only when it says :data:`REQUEUE_CONFIRM`.
    :raises airflow.sdk.exceptions.AirflowFailException: no user or no option in the answer."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.resolve import resolve

    chosen = (response or {}).get("chosen_options") or []
    user = (response or {}).get("responded_by_user") or {}
    if len(chosen) != 1 or chosen[0] not in REVIEW_OPTIONS or not user.get("name"):
        raise AirflowFailException(f"the Required Action's answer is unusable: options {chosen}, "
                                   f"user {user.get('name')!r}")
    ids = list(collected["ids"])
    if chosen[0] == "not sent, requeue":
        confirmed = ((confirmation or {}).get("chosen_options") or [None])[0]
        if confirmed != REQUEUE_CONFIRM:
            log.info("Required Action: %s chose 'not sent, requeue' for emails %s but did not "
                     "confirm it (%r); they stay unconfirmed", user["name"], ids, confirmed)
            return {"decision": "leave_for_later", "resolved": [], "skipped": ids,
                    "by": user["name"]}
        user = (confirmation or {}).get("responded_by_user") or user
    if chosen[0] == "leave for later":
        log.info("Required Action: %s left emails %s for later; they stay unconfirmed "
                 "(outreach_resolve_unconfirmed or outreach resolve decide them later)",
                 user["name"], ids)
        return {"decision": "leave_for_later", "resolved": [], "skipped": ids,
                "by": user["name"]}
    from outreach.audit import Who

    result = resolve(database_url(), REVIEW_DECISIONS[chosen[0]], user["name"], ids=ids,
                     note=f"Required Action {dag_id}/{run_id} (Airflow user id {user.get('id')})",
                     who=Who(user["name"], "airflow", dag_id, run_id))
    return {"decision": result.decision, "resolved": result.resolved, "skipped": result.skipped,
            "by": user["name"]}
