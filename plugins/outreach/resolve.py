r"""Operators resolve unconfirmed emails: only a person who checked Sent Items can say.

"was sent" records it in the send log as operator-confirmed and marks the row sent (a late
acceptance kept as evidence); "not sent" requeues it with the same idempotency key (so the same
Message-ID). A trigger (0002) refuses any other move of an unconfirmed row. :func:`sent_evidence`
searches the mailbox's ``\Sent`` folder (RFC 6154) for the Message-ID (RFC 3501 §6.4.4): found is
evidence, not found proves nothing. docs/howto/operating-failures.md."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from outreach import audit, db
from outreach.logutil import log, mailbox_name, mask, mask_addresses
from outreach.message import message_id_for
from outreach.store import emails, resolutions

DECISIONS = ("was_sent", "not_sent")


@dataclass
class Resolution:
    """What a resolution did: ``resolved`` ids, ``skipped`` ids (no longer unconfirmed)."""

    decision: str
    resolved: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)

    def line(self) -> str:
        """Return the one-line summary for logs."""
        return (f"resolve {self.decision}: resolved={len(self.resolved)} {self.resolved} "
                f"skipped={len(self.skipped)} {self.skipped}")


def evidence(row: dict[str, Any]) -> str | None:
    """Return the database's evidence about an unconfirmed row besides Sent Items, as one line: the
    late acceptance (``accepted late at … UTC: 250 2.0.0 OK queued; Message-ID <…>``), or ``None``.

    :param row: a row of ``email_list_unconfirmed``."""
    if not row.get("late_accepted_at"):
        return None
    at = row["late_accepted_at"].astimezone(dt.UTC)
    return (f"accepted late at {at:%Y-%m-%d %H:%M:%S} UTC: {row['late_accept_reply']}; "
            f"Message-ID <{row['late_accept_message_id']}>")


def describe_unconfirmed(row: dict[str, Any]) -> str:
    """Return the operator's one line about an unconfirmed email (masked): id, campaign, mailbox, claim,
    handoff, why and any evidence, as ``outreach unconfirmed`` and the resolve DAG log it.

    :param row: a row of ``email_list_unconfirmed``."""
    def utc(t: dt.datetime | None) -> str:
        return f"{t.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC" if t else "never"

    seen = evidence(row)
    return (f"email {row['id']}  {row['campaign_key'] or row['message_class']}  mailbox "
            f"{row['mailbox_id']}  to {mask(row['email'])}  claimed {utc(row['claimed_at'])} by "
            f"{row['claimed_by']}  handed over {utc(row['handed_over_at'])}  - {row['last_error']}"
            + (f"  EVIDENCE: {seen}" if seen else ""))
SMTP_STAGES = ("CONNECT", "MAIL", "RCPT", "DATA", "BODY", "END_OF_DATA")


def _stage(error: str) -> str:
    """The SMTP stage an unconfirmed row's ``last_error`` starts with (``outreach.transport.Stage``),
    or what is known when it has none (the reaper failed a row its sender left ``sending``)."""
    first = error.split(" ", 1)[0] if error else ""
    if first in SMTP_STAGES:
        return first
    return "unknown: the sender was lost mid-batch" if error.startswith("left sending") else "unknown"


def unconfirmed_details(url: str, ids: list[int] | None = None, *,
                        accounts: Callable[[str], Any] | None = None) -> list[dict[str, Any]]:
    """Return the unconfirmed emails (all, or ``ids``) as operators see them.

    Keys: ``id``, ``campaign``, ``step``, ``recipient`` (masked), ``mailbox``, ``message_id``,
    ``claimed_at`` and ``handed_over_at`` (ISO, UTC), ``stage``, ``error`` (masked) and
    ``evidence`` (the Sent folder's answer, always saying whether it was checked, and any late
    acceptance).

    :param accounts: IMAP connection id → account; ``None``: no search (``not checked``)."""
    with db.connect(url, autocommit=True) as conn:
        # Dict rows: evidence(), row_message_id() and sent_evidence() read them by column name.
        rows = [asdict(r) for r in emails.email_unconfirmed_details(conn, ids=ids)]
    sent = (sent_evidence(rows, accounts) if accounts is not None else
            {r["id"]: SentEvidence("not_searched" if r.get("imap_conn_id") else "no_imap")
             for r in rows}) if rows else {}
    out = []
    for r in rows:
        error = mask_addresses(r["last_error"] or "")
        seen = [t for t in (sent[r["id"]].text(), evidence(r)) if t]
        out.append({
            "id": r["id"], "campaign": r["campaign_key"] or r["message_class"],
            "step": r["step"] if r["step"] is not None else r["template"],
            "recipient": mask(r["email"]),
            "mailbox": mailbox_name(r["label"], r["display_name"], r["mailbox_address"]),
            "message_id": row_message_id(r),
            "claimed_at": r["claimed_at"].isoformat() if r["claimed_at"] else None,
            "handed_over_at": r["handed_over_at"].isoformat() if r["handed_over_at"] else None,
            "stage": _stage(error),
            "error": error,
            "evidence": "; ".join(seen),
        })
    return out


def list_unconfirmed(url: str, *, ids: list[int] | None = None, campaign_key: str | None = None,
                     mailbox: str | None = None) -> list[dict[str, Any]]:
    """Return unconfirmed emails selected by ids, or by campaign key and/or mailbox (address or id)."""
    with db.connect(url, autocommit=True) as conn:
        return [asdict(r) for r in emails.email_list_unconfirmed(
            conn, ids=ids, campaign_key=campaign_key, mailbox=mailbox)]


def resolve(url: str, decision: str, resolved_by: str, *, ids: list[int] | None = None,
            campaign_key: str | None = None, mailbox: str | None = None, note: str = "",
            who: audit.Who | None = None) -> Resolution:
    """Resolve unconfirmed emails, one transaction per email (a guarded UPDATE and its audit row).

    :param decision: ``"was_sent"`` or ``"not_sent"``.
    :param resolved_by: the person deciding (recorded).
    :param ids: email ids; or select by ``campaign_key`` and/or ``mailbox``.
    :param who: who is authenticated (default ``resolved_by`` through ``api``).
    :raises ValueError: unknown decision, no operator name, or no selection at all."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, got {decision!r}")
    if not resolved_by.strip():
        raise ValueError("say who decides (resolved_by)")
    if not ids and not campaign_key and not mailbox:
        raise ValueError("select emails by ids, or by campaign and/or mailbox")
    result = Resolution(decision)
    rows = list_unconfirmed(url, ids=ids, campaign_key=campaign_key, mailbox=mailbox)
    found = {r["id"] for r in rows}
    result.skipped.extend(i for i in (ids or []) if i not in found)
    conn = db.connect(url)
    try:
        for r in rows:
            seen = evidence(r)
            with conn.transaction():
                resolutions.resolution_begin(conn)
                if decision == "was_sent":
                    reply = f"operator {resolved_by}: {note}".strip().rstrip(":")
                    done = emails.email_resolve_was_sent(
                        conn, email_id=r["id"], note=reply + (f" ({seen})" if seen else ""),
                        message_id=message_id_for(str(r["idempotency_key"]), r["mailbox_address"]))
                else:
                    done = emails.email_resolve_not_sent(conn, email_id=r["id"], note=note)
                if done:
                    resolutions.resolution_insert(conn, email_id=r["id"], decision=decision,
                                                  resolved_by=resolved_by, note=note,
                                                  evidence=seen)
                    audit.record_as(conn, who or audit.Who(resolved_by), by=resolved_by,
                                    action="resolve", target_kind="email", target_id=r["id"],
                                    campaign_key=r["campaign_key"], reason=note or None,
                                    details={"decision": decision,
                                             "late_acceptance": seen is not None})
                    result.resolved.append(r["id"])
                    log.info("email %s (%s) resolved as %s by %s%s", r["id"], mask(r["email"]),
                             decision, resolved_by, f"; evidence: {seen}" if seen else "")
                else:
                    result.skipped.append(r["id"])
    finally:
        conn.close()
    log.info(result.line())
    return result


@dataclass(frozen=True)
class SentEvidence:
    r"""What the mailbox's Sent folder says about one email: ``state`` is ``found`` (``folder``, and
    ``date`` in UTC), ``not_found``, ``no_sent_folder``, ``no_imap``, ``not_searched`` or
    ``unreadable`` (``detail`` names the connection and IMAP stage)."""

    state: str
    folder: str | None = None
    date: dt.datetime | None = None
    detail: str = ""

    def text(self) -> str:
        """Return the evidence for people, one phrase that starts with what was done: *checked:*
        (the Sent folder was searched) or *not checked:* (and why). The Required Action, the
        campaign page and ``outreach report`` show exactly this phrase."""
        if self.state == "found":
            return (f"checked: found in Sent folder {self.folder!r}, dated "
                    f"{self.date:%Y-%m-%d %H:%M} UTC")
        return {"not_found": f"checked: not found in Sent folder {self.folder!r} (proves nothing:"
                             " many relays file nothing there)",
                "no_sent_folder": "not checked: the IMAP account has no \\Sent folder",
                "no_imap": "not checked: no IMAP connection for this mailbox (check Sent Items "
                           "by hand)",
                "not_searched": "not checked: this command does not search Sent folders (the "
                                "Required Action and the campaign page do)",
                }.get(self.state, f"not checked: Sent folder unreadable ({self.detail})")


def row_message_id(row: dict[str, Any]) -> str:
    """Return the Message-ID (without <>) an unconfirmed row went out with, or would have."""
    return message_id_for(str(row["idempotency_key"]), row["mailbox_address"])


def sent_evidence(rows: list[dict[str, Any]], accounts: Callable[[str], Any],
                  ) -> dict[int, SentEvidence]:
    """Search each row's mailbox's Sent folder for its Message-ID (one IMAP session per account).

    :param rows: from :func:`list_unconfirmed` (they carry ``imap_conn_id``).
    :param accounts: Airflow IMAP connection id → :class:`outreach.imap.ImapAccount`.
    :returns: ``{email_id: SentEvidence}`` for every row (an unreadable account: ``unreadable``)."""
    from outreach.imap import ImapError, ImapSession

    out: dict[int, SentEvidence] = {}
    by_account: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("imap_conn_id"):
            by_account.setdefault(r["imap_conn_id"], []).append(r)
        else:
            out[r["id"]] = SentEvidence("no_imap")
    for conn_id, group in by_account.items():
        try:
            with ImapSession(accounts(conn_id)) as session:
                folder = session.sent_folder()
                if folder is None:
                    out.update({r["id"]: SentEvidence("no_sent_folder") for r in group})
                    continue
                session.select(folder)
                for r in group:
                    when = session.find_message_id(row_message_id(r))
                    out[r["id"]] = SentEvidence("found" if when else "not_found", folder, when)
        except (ImapError, LookupError) as exc:
            detail = f"connection {conn_id}: {exc}"
            log.error("Sent-folder evidence: %s", detail)
            for r in group:
                out.setdefault(r["id"], SentEvidence("unreadable", detail=detail))
    return out


def resolve_found(url: str, resolved_by: str, accounts: Callable[[str], Any], *,
                  campaign_key: str | None = None, mailbox: str | None = None,
                  who: audit.Who | None = None) -> Resolution:
    """Resolve ``was_sent``, with the evidence as the note, every unconfirmed email (of a campaign or
    mailbox) found in its Sent folder; the others stay. ``who`` as for :func:`resolve`.

    :raises ValueError: no operator name."""
    if not resolved_by.strip():
        raise ValueError("say who decides (resolved_by)")
    rows = list_unconfirmed(url, campaign_key=campaign_key, mailbox=mailbox)
    evidence = sent_evidence(rows, accounts)
    result = Resolution("was_sent")
    for r in rows:
        ev = evidence[r["id"]]
        if ev.state != "found":
            result.skipped.append(r["id"])
            continue
        note = f"{ev.text()} (Message-ID <{row_message_id(r)}>; outreach resolve --auto-found)"
        done = resolve(url, "was_sent", resolved_by, ids=[r["id"]], note=note, who=who)
        result.resolved.extend(done.resolved)
        result.skipped.extend(done.skipped)
    log.info(result.line())
    return result


REQUEUE_KINDS = ("retries_exhausted", "sender_refused")
"""Failure kinds an operator may requeue: not accepted by any attempt, so never sent twice."""


@dataclass
class Requeue:
    """What a requeue did: ``requeued`` ids, ``skipped`` ids (``{id: why}``: not failed with
    that kind, e.g. unconfirmed or permanent)."""

    failure_kind: str
    requeued: list[int] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)

    def line(self) -> str:
        """Return the one-line summary for logs."""
        skipped = ", ".join(f"{i} ({why})" for i, why in self.skipped.items())
        return (f"requeue {self.failure_kind}: requeued={len(self.requeued)} {self.requeued} "
                f"skipped={len(self.skipped)}" + (f" [{skipped}]" if skipped else ""))


def requeue_failed(url: str, failure_kind: str, requeued_by: str, reason: str, *,
                   ids: list[int] | None = None, campaign_key: str | None = None,
                   mailbox: str | None = None, who: audit.Who | None = None) -> Requeue:
    """Put emails that failed without ever being accepted back in the queue (``email_requeue_failed``).

    Attempts start from 0, the Message-ID stays, each requeue is recorded with who, why and the
    failure. Unconfirmed rows and permanent failures are never requeued.

    :param failure_kind: one of :data:`REQUEUE_KINDS` (``retries_exhausted``, ``sender_refused``).
    :param requeued_by: the person deciding (recorded).
    :param reason: why (recorded), e.g. "relay fixed, ticket 4711".
    :param ids: email ids; ``campaign_key`` and/or ``mailbox`` narrow; none: every such failure.
    :param who: who is authenticated (default ``requeued_by`` through ``api``): one audit row.
    :raises ValueError: another failure kind, or no name or reason."""
    if failure_kind not in REQUEUE_KINDS:
        raise ValueError(f"--failed-kind must be one of {REQUEUE_KINDS} (unconfirmed emails are "
                         f"resolved with `outreach resolve`; permanent failures would fail "
                         f"again), got {failure_kind!r}")
    if not requeued_by.strip() or not reason.strip():
        raise ValueError("say who requeues (--by) and why (--reason): both are recorded")
    result = Requeue(failure_kind)
    with db.transaction(url) as conn:
        done = emails.email_requeue_failed(
            conn, failure_kind=failure_kind, ids=ids, campaign_key=campaign_key, mailbox=mailbox,
            requeued_by=requeued_by, reason=reason)
        result.requeued = sorted(r.email_id for r in done)
        if result.requeued:
            audit.record_as(conn, who or audit.Who(requeued_by), by=requeued_by,
                            action="requeue", target_kind="email",
                            target_id=result.requeued[0] if len(result.requeued) == 1 else None,
                            campaign_key=campaign_key, reason=reason,
                            details={"failure_kind": failure_kind, "ids": result.requeued,
                                     "count": len(result.requeued)})
        missing = [i for i in (ids or []) if i not in result.requeued]
        if missing:
            found = {f.id: f for f in emails.email_failure_state(conn, ids=missing)}
            for i in missing:
                f = found.get(i)
                result.skipped[i] = ("no such email" if f is None else
                                     f"{f.status}/{f.failure_kind}" if f.failure_kind
                                     else f.status)
    for d in done:
        log.info("email %s requeued by %s (%s) after %s attempt(s): %s", d.email_id,
                 requeued_by, reason, d.attempts, d.last_error)
    log.info(result.line())
    return result
