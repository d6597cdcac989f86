"""The inbox reader: each mailbox's IMAP inbox read, every message classified, recorded once and
its effect applied in the same transaction as its record.

A message's row is inserted ``ON CONFLICT DO NOTHING RETURNING`` under UNIQUE (account, folder,
UIDVALIDITY, UID) and (account, Message-ID), and its effect applied only when the insert returned
it, so a retried, cleared, concurrent or killed read changes nothing twice; a new UIDVALIDITY
(RFC 3501 §2.3.1.1) rereads the folder. Classes: :mod:`outreach.inbound`; failures:
:func:`outreach.bounces.apply_failure`. Each class's effect: docs/howto/inbound-mail.md; why:
docs/explanation/bounces-and-complaints.md."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from outreach import db, failpoints
from outreach.addresses import normal_form
from outreach.bounces import apply_failure, kind_of
from outreach.imap import ImapAccount, ImapError, ImapSession
from outreach.inbound import Classified, Inbound, classify
from outreach.logutil import log, mask, mask_addresses
from outreach.reasons import reason_of
from outreach.store import emails as emails_store
from outreach.store import enrollments as enrollments_store
from outreach.store import inbound as inbound_store
from outreach.store import leads as leads_store
from outreach.suppression import suppress, unsubscribe_email

FOLDER = "INBOX"
ACTOR = "inbox"
FREE_MAIL_DOMAINS = frozenset({
    "gmail.com", "googlemail.com", "outlook.com", "hotmail.com", "live.com", "msn.com",
    "yahoo.com", "ymail.com", "icloud.com", "me.com", "aol.com", "gmx.de", "gmx.net", "web.de",
    "t-online.de", "proton.me", "protonmail.com", "mail.ru", "yandex.ru", "qq.com", "163.com"})
"""Domains shared by unrelated people: a reply from one never stops the others
(``stop_on_domain_reply`` means "the same company")."""

AccountLoader = Callable[[str], ImapAccount]
"""Given an Airflow IMAP connection id, return the account (raise when it cannot)."""

COUNTED = ("reply", "auto_reply", "hard_bounce", "soft_bounce", "sender_block",
           "delivery_report", "complaint", "unsubscribe", "unmatched", "already_seen")
OWNERS = {"hard_bounce": "address", "soft_bounce": "transient", "sender_block": "sender"}
"""The owner a bounce class implies, for a report that told no reason (no status, diagnostic)."""
REPORTS = ("hard_bounce", "soft_bounce", "sender_block", "delivery_report", "complaint")
"""Classes that report on one of our emails: matched by our Message-ID, never by a reply."""


class InboxError(RuntimeError):
    """A mailbox could not be read: the message names the mailbox (masked), the connection and
    the IMAP stage. ``summary`` holds what was done before it failed."""

    def __init__(self, message: str, summary: InboxSummary) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass
class InboxSummary:
    """What one read of one account did: ``fetched`` and one count per class, plus
    ``already_seen`` (recorded by an earlier or concurrent run: nothing applied)."""

    label: str          # the masked mailbox address
    conn_id: str
    fetched: int = 0
    reply: int = 0
    auto_reply: int = 0
    hard_bounce: int = 0
    soft_bounce: int = 0
    sender_block: int = 0
    delivery_report: int = 0
    complaint: int = 0
    unsubscribe: int = 0
    unmatched: int = 0
    already_seen: int = 0
    truncated: int = 0   # messages above outreach.imap.MAX_MESSAGE_BYTES, read in part
    left: int = 0        # messages waiting for the next run (only with a limit)
    uidvalidity: int | None = None
    error: str = ""

    def line(self) -> str:
        """Return the analyst-facing summary line of this mailbox."""
        text = (f"inbox {self.label} (connection {self.conn_id}): fetched={self.fetched} "
                f"replies={self.reply} auto_replies={self.auto_reply} "
                f"hard_bounces={self.hard_bounce} soft_bounces={self.soft_bounce} "
                f"sender_blocks={self.sender_block} delivery_reports={self.delivery_report} "
                f"complaints={self.complaint} unsubscribes={self.unsubscribe} "
                f"unmatched={self.unmatched} already_seen={self.already_seen} "
                f"truncated={self.truncated} left={self.left}")
        return text + (f" FAILED {self.error}" if self.error else "")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return asdict(self)


def plan_targets(url: str) -> list[dict[str, Any]]:
    """Return the accounts to read, one per IMAP connection.

    Each ``{"conn_id", "label" (masked), "mailbox_id" (``None`` for a shared unsubscribe account),
    "mailbox_ids"}``; an ``unsubscribe_imap_conn_id`` is read once however many mailboxes name it,
    and not at all when it is also some mailbox's own inbox."""
    with db.connect(url, autocommit=True) as conn:
        rows = inbound_store.inbound_targets(conn)
    own = {r.imap_conn_id: r for r in rows if r.imap_conn_id}
    targets = [{"conn_id": r.imap_conn_id, "label": mask(r.address), "mailbox_id": r.id,
                "mailbox_ids": [r.id]} for r in own.values()]
    shared: dict[str, dict[str, Any]] = {}
    for r in rows:
        cid = r.unsubscribe_imap_conn_id
        if not cid or cid in own:
            continue
        t = shared.setdefault(cid, {"conn_id": cid, "label": mask(
            "unsubscribe@" + r.address.rpartition("@")[2]), "mailbox_id": None, "mailbox_ids": []})
        t["mailbox_ids"].append(r.id)
    return targets + list(shared.values())


def read_target(url: str, target: dict[str, Any], accounts: AccountLoader, *,
                unsubscribe_secret: str | None = None, limit: int | None = None,
                now: dt.datetime | None = None) -> InboxSummary:
    """Read one account's INBOX (read-only, ``BODY.PEEK``) from where the last run stopped, and process
    every new message, each committed as it is processed.

    :param target: one of :func:`plan_targets`.
    :param accounts: turns the connection id into an :class:`~outreach.imap.ImapAccount`.
    :param unsubscribe_secret: the HMAC secret of unsubscribe tokens; without it a mailto
        unsubscribe is handled by its sender's address.
    :param limit: messages at most (the summary's ``left`` says how many wait); default the whole
        backlog, :data:`outreach.imap.FETCH_CHUNK` in memory at a time.
    :param now: a fixed clock (UTC) for the effects' rules; default the database clock.
    :returns: the summary (also logged as one line).
    :raises InboxError: the account could not be read (connection missing, CONNECT, LOGIN, SELECT,
        SEARCH or FETCH); what was processed before stays processed."""
    summary = InboxSummary(label=target["label"], conn_id=target["conn_id"])
    conn = db.connect(url, autocommit=True)
    try:
        try:
            account = accounts(target["conn_id"])
        except Exception as exc:  # noqa: BLE001 - a missing connection names itself
            return _fail(summary, "CONNECTION", str(exc))
        try:
            with ImapSession(account) as session:
                uidvalidity = session.select(FOLDER)
                summary.uidvalidity = uidvalidity
                last_uid = inbound_store.inbound_cursor_get(
                    conn, account=target["conn_id"], folder=FOLDER, uidvalidity=uidvalidity)
                since = None
                if last_uid is None:
                    first = inbound_store.inbound_first_send(
                        conn, mailbox_ids=target["mailbox_ids"])
                    since = ((first or dt.datetime.now(dt.UTC)) - dt.timedelta(days=1)).date()
                uids = session.uids_after(last_uid if last_uid is not None else 0, since)
                if limit is not None:
                    uids, summary.left = uids[:limit], max(0, len(uids) - limit)
                for fetched in session.fetch(uids):
                    summary.fetched += 1
                    if fetched.truncated:
                        summary.truncated += 1
                    outcome = _process(conn, target, uidvalidity, fetched.uid, fetched.raw,
                                       fetched.internaldate, unsubscribe_secret, now)
                    setattr(summary, outcome, getattr(summary, outcome) + 1)
        except ImapError as exc:
            return _fail(summary, exc.stage, exc.reason)
    finally:
        conn.close()
    log.info(summary.line(), extra=SUMMARY_LOG.extra)
    return summary


class _SummaryLog(logging.Filter):
    """Marks the log records of a read's summary line (``extra``) and, as a filter, drops them:
    ``outreach inbox`` prints that line itself and adds them back with ``-v``."""

    extra = {"outreach_summary": True}

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but a summary line's."""
        return not getattr(record, "outreach_summary", False)


SUMMARY_LOG = _SummaryLog()
"""See :class:`_SummaryLog`."""


def _fail(summary: InboxSummary, stage: str, reason: str) -> InboxSummary:
    reason = mask_addresses(reason)  # a server may quote the login
    summary.error = f"IMAP stage {stage}: {reason}" if stage != "CONNECTION" else reason
    log.error(summary.line(), extra=SUMMARY_LOG.extra)
    raise InboxError(f"inbox {summary.label} (connection {summary.conn_id}) could not be read: "
                     f"{summary.error}", summary)


_AUTOMATED_HEADERS = ("Auto-Submitted", "X-Failed-Recipients", "X-Autoreply", "X-Autorespond",
                      "X-Auto-Response-Suppress")


def automated(raw: bytes) -> str:
    """Why the message ``raw`` was written by a program (the header that says so), or ``''``.

    Reads the header only: a null reverse-path (RFC 5321 §4.5.5), a daemon sender
    (:data:`outreach.inbound.BOUNCE_SENDERS`), ``multipart/report`` (RFC 6522), ``Auto-Submitted``
    (RFC 3834), ``X-Failed-Recipients`` and auto-responder headers. Issue 23: such a message never
    goes through reply matching."""
    from email.parser import BytesHeaderParser
    from email.utils import parseaddr

    from outreach.inbound import BOUNCE_SENDERS

    head = BytesHeaderParser().parsebytes(raw[:256 * 1024])
    if str(head.get("Return-Path", "")).strip() == "<>":
        return "Return-Path: <>"
    sender = parseaddr(str(head.get("From", "")))[1].partition("@")[0].lower()
    if sender in BOUNCE_SENDERS:
        return f"From: {sender}@…"
    if str(head.get("Content-Type", "")).strip().lower().startswith("multipart/report"):
        return "Content-Type: multipart/report"
    for name in _AUTOMATED_HEADERS:
        value = head.get(name)
        if value is not None and not (name == "Auto-Submitted"
                                      and str(value).split(";")[0].strip().lower() == "no"):
            return f"{name}: {str(value)[:40]}"
    return ""


def _process(conn: psycopg.Connection, target: dict[str, Any], uidvalidity: int, uid: int,
             raw: bytes, received: dt.datetime | None, secret: str | None,
             now: dt.datetime | None = None) -> str:
    """Classify, record and apply one message in one transaction; return the summary field it
    counts toward (a class, or ``already_seen``). A deadlock with a concurrent reader is retried."""
    inbound, verdict = (_without_nul(v) for v in classify(raw))
    why_automated = automated(raw)
    for attempt in range(3):
        try:
            with conn.transaction():
                outcome = _record_and_apply(conn, target, uidvalidity, uid, inbound, verdict,
                                            received, secret, why_automated, now)
                failpoints.hit("inbox_before_commit")
            failpoints.hit("inbox_after_commit")
            return outcome
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _text_without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, tuple):
        return tuple(_text_without_nul(v) for v in value)
    if isinstance(value, dict):
        return {k: _text_without_nul(v) for k, v in value.items()}
    return value


def _without_nul(parsed: Any) -> Any:
    """Return the :class:`Inbound` or :class:`Classified` with every NUL removed from its text.

    PostgreSQL text cannot hold one, and a header decoding to NUL would fail the message's
    transaction on every run, the account's read stuck at that UID."""
    return dataclasses.replace(parsed, **{f.name: _text_without_nul(getattr(parsed, f.name))
                                          for f in dataclasses.fields(parsed)})


@dataclass
class _Match:
    email: dict[str, Any] | None = None
    lead_id: int | None = None
    enrollments: list[dict[str, Any]] = field(default_factory=list)
    how: str = ""


def _match(conn, target: dict[str, Any], inbound: Inbound, verdict: Classified,
           secret: str | None) -> _Match:
    """Find our email / lead / enrolments the message concerns (reads only)."""
    ids = list(verdict.original_ids) + list(inbound.references)
    if ids:
        # A matched email stays a dict: a token's match is {"id": …} alone (below).
        found = {r.message_id: asdict(r) for r in emails_store.email_by_message_ids(conn, ids=ids)}
        for i in ids:
            if i in found:
                e = found[i]
                how = ("enclosed original Message-ID" if i in verdict.original_ids
                       else "In-Reply-To" if i in inbound.in_reply_to else "References")
                m = _Match(e, e["lead_id"], how=f"{how} <{i}>")
                if e["lead_id"] is not None:
                    m.enrollments = [asdict(a) for a in enrollments_store.enrollment_active_for_lead(
                        conn, lead_id=e["lead_id"], campaign_id=e["campaign_id"], mailbox_id=None)]
                return m
    if verdict.kind == "unsubscribe" and verdict.token and secret:
        from outreach.tokens import TokenError, read_token

        try:
            email_id = read_token(secret, verdict.token)
        except TokenError:
            email_id = None
        if email_id is not None:
            return _Match({"id": email_id}, None, how="unsubscribe token")
    if verdict.kind in REPORTS:
        # A report that names none of our Message-IDs is unverified (anyone can mail us one): it
        # is recorded against the lead, for the timeline, but never against an email, and
        # changes nothing (outreach.bounces, "Forged reports").
        for address in verdict.addresses:
            # Leads are stored in the normal form; a DSN names RCPT TO (the domain in ACE).
            latest = emails_store.email_latest_sent_to(conn, address=normal_form(address),
                                                       mailbox_id=target["mailbox_id"])
            if latest is not None:
                return _Match(None, latest.lead_id, how=f"unverified: names none of our "
                              f"Message-IDs; latest email sent to {mask(address)} is "
                              f"{latest.id}")
        return _Match()
    if inbound.from_address:
        lead = leads_store.lead_by_address(conn, address=normal_form(inbound.from_address))
        if lead is not None:
            enrollments = [asdict(a) for a in enrollments_store.enrollment_active_for_lead(
                conn, lead_id=lead.id, campaign_id=None, mailbox_id=target["mailbox_id"])]
            if enrollments or verdict.kind == "unsubscribe":
                return _Match(None, lead.id, enrollments, how="sender address")
    return _Match()


def _record_and_apply(conn, target: dict[str, Any], uidvalidity: int, uid: int, inbound: Inbound,
                      verdict: Classified, received: dt.datetime | None, secret: str | None,
                      automated: str = "", now: dt.datetime | None = None) -> str:
    told = bool(verdict.dsn_status or verdict.diagnostic)
    kind = kind_of(verdict.kind, verdict.owner, verdict.evidence, told=told)
    if kind in ("hard_bounce", "soft_bounce", "sender_block") and not told:
        # Nothing to tell a reason from: the classifier's hard/soft stands (outreach.bounces).
        verdict = dataclasses.replace(verdict, reason="undefined" if kind == "hard_bounce"
                                      else "delayed")
    verdict = dataclasses.replace(verdict, kind=kind)
    evidence = verdict.evidence
    if kind == "reply" and automated:
        # An automated message is never a person's reply, whatever its Subject or In-Reply-To
        # (issue 23): it never goes through reply matching.
        kind, evidence = "unmatched", f"automated ({automated}): never a reply; {evidence}"
        match = _Match()
    else:
        match = _match(conn, target, inbound, verdict, secret)
    if kind == "reply" and match.email is None and not match.enrollments:
        kind = "unmatched"
    evidence = evidence + (f"; matched by {match.how}" if match.how else "")
    address = (verdict.addresses[0] if verdict.addresses else None)
    if match.email and match.email.get("email") and kind in REPORTS:
        address = match.email["email"]
    inbound_store.inbound_cursor_advance(conn, account=target["conn_id"], folder=FOLDER,
                                         uidvalidity=uidvalidity, uid=uid)
    inbound_id = inbound_store.inbound_insert(
        conn, account=target["conn_id"], folder=FOLDER, uidvalidity=uidvalidity, uid=uid,
        mailbox_id=target["mailbox_id"], message_id=inbound.message_id,
        from_address=inbound.from_address, subject=inbound.subject, class_=kind,
        evidence=evidence[:500], email_id=match.email["id"] if match.email else None,
        lead_id=match.lead_id, address=address, dsn_status=verdict.dsn_status,
        received_at=received, reason=verdict.reason if kind in REPORTS else None,
        diagnostic=verdict.diagnostic if kind in REPORTS else None)
    if inbound_id is None:
        return "already_seen"
    effect = _apply(conn, kind, inbound_id, inbound, match, address, verdict, now)
    inbound_store.inbound_set_effect(conn, id=inbound_id, effect=effect[:500])
    log.info("inbound %s uid %s: %s (%s) -> %s", target["label"], uid, kind,
             mask_addresses(evidence[:120]), effect)
    return kind


def _stop(conn, enrollment_id: int, status: str, reason: str) -> int:
    return int(enrollments_store.enrollment_stop(conn, enrollment_id=enrollment_id, status=status,
                                                 reason=reason, by=ACTOR) or 0)


def _names_our_recipient(verdict: Classified, recipient: str) -> bool:
    """Whether a report citing our Message-ID also names that email's recipient (when it names any).

    A Message-ID is no secret: docs/explanation/bounces-and-complaints.md#forged-reports."""
    if not verdict.addresses:
        return True
    ours = normal_form(recipient).lower()
    return any(normal_form(a).lower() == ours for a in verdict.addresses)


def _apply(conn, kind: str, inbound_id: int, inbound: Inbound, match: _Match,
           address: str | None, verdict: Classified, now: dt.datetime | None = None) -> str:
    """Apply the effect of one newly recorded message; return what was done, for people."""
    source = f"inbound:{inbound_id}"
    if kind == "delivery_report":
        return "none: a delivery report (delayed, relayed or delivered) changes nothing"
    if kind in ("hard_bounce", "soft_bounce", "sender_block"):
        if not (match.email and match.email.get("email")):
            return ("none: names none of our Message-IDs (unverified report: recorded only)"
                    if match.how else "none: no email of ours matched")
        if not _names_our_recipient(verdict, match.email["email"]):
            return (f"none: the report names {', '.join(mask(a) for a in verdict.addresses[:3])} "
                    f"as failed, not the recipient of email {match.email['id']} (unverified "
                    "report: recorded only)")
        told = bool(verdict.dsn_status or verdict.diagnostic)
        reason = verdict.reason or reason_of(verdict.dsn_status, verdict.diagnostic)
        return apply_failure(
            conn, email_id=match.email["id"], mailbox_id=match.email.get("mailbox_id"),
            address=match.email["email"], reason=reason, status=verdict.dsn_status,
            diagnostic=verdict.diagnostic, source=source, actor=ACTOR, now=now,
            owner=None if told else OWNERS[kind]).text
    if kind == "complaint":
        target = match.email["email"] if match.email and match.email.get("email") else None
        if target is None:
            return "none: no email of ours matched"
        if not _names_our_recipient(verdict, target):
            return (f"none: the complaint names another complainant than the recipient of email "
                    f"{match.email['id']} (unverified report: recorded only)")
        added, cancelled = suppress(conn, target, "complained", source, actor=ACTOR)
        return (f"suppressed {mask(target)} (complained), {cancelled} queued cancelled"
                if added else f"{mask(target)} was already suppressed")
    if kind == "unsubscribe":
        if match.how == "unsubscribe token":
            done = unsubscribe_email(conn, match.email["id"], source=f"mailto:{source}",
                                     actor="recipient (mailto)")
            if done is not None:
                return (f"suppressed {mask(done.address)} (unsubscribed, token of email "
                        f"{done.email_id}), {done.cancelled} queued cancelled")
        parts = []
        for a in dict.fromkeys(filter(None, [inbound.from_address,
                                             match.email.get("email") if match.email else None])):
            try:
                added, cancelled = suppress(conn, a, "unsubscribed", f"mailto:{source}", actor=ACTOR)
            except ValueError as exc:
                parts.append(f"{mask(a)} not suppressed ({exc})")
                continue
            parts.append(f"suppressed {mask(a)} (unsubscribed), {cancelled} queued cancelled"
                         if added else f"{mask(a)} was already suppressed")
        return "; ".join(parts) or "none: no sender address"
    if kind == "auto_reply":
        stops = [e for e in match.enrollments if e["stop_on_auto_reply"]]
        if not stops:
            return ("none: auto-replies do not stop the sequence (stop_on_auto_reply: false)"
                    if match.enrollments else "none")
        cancelled = sum(_stop(conn, e["id"], "stopped",
                              f"auto-reply (stop_on_auto_reply), inbound {inbound_id}") for e in stops)
        return (f"enrolment(s) {[e['id'] for e in stops]} stopped (stop_on_auto_reply), "
                f"{cancelled} queued cancelled")
    if kind == "reply":
        if not match.enrollments:
            return "none: no active enrolment (already stopped, or not a campaign email)"
        parts = []
        for e in match.enrollments:
            cancelled = _stop(conn, e["id"], "replied", f"reply, inbound {inbound_id}")
            parts.append(f"enrolment {e['id']} ({e['campaign_key']}) stopped: replied, "
                         f"{cancelled} queued cancelled")
            domain = (inbound.from_address.rpartition("@")[2] if match.how == "sender address"
                      else (match.email or {}).get("email", "").rpartition("@")[2])
            if e["stop_on_domain_reply"] and domain and domain not in FREE_MAIL_DOMAINS:
                others = enrollments_store.enrollment_active_same_domain(
                    conn, campaign_id=e["campaign_id"], lead_id=e["lead_id"], domain=domain)
                n = sum(_stop(conn, o.id, "stopped",
                              f"a colleague at {domain} replied (stop_on_domain_reply), inbound "
                              f"{inbound_id}") for o in others)
                parts.append(f"{len(others)} colleague(s) at {domain} stopped "
                             f"(stop_on_domain_reply), {n} queued cancelled")
        return "; ".join(parts)
    return "none"
