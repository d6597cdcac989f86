"""What one delivery failure changes: the effect by owner, one function for every path.

Every failure of one recipient (our SMTP session, a DSN from an inbox, an ESP event) is a reason
of :mod:`outreach.reasons` and goes through :func:`apply_failure` (or
:func:`apply_reported_failure`). Owners: ``address`` suppresses ``bounced``; ``sender`` counts
the block and may pause the mailbox (:func:`likely_fix`); ``transient`` suppresses after repeated
soft bounces; ``none`` nothing. Each failure is one row inserted ``ON CONFLICT DO NOTHING``; the
counts are taken under advisory locks; a report naming none of our Message-IDs changes nothing.
The table, thresholds and why: docs/explanation/bounces-and-complaints.md."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from outreach.addresses import normal_form
from outreach.logutil import log, mask
from outreach.mailboxes import pause
from outreach.reasons import REASONS, owner_of, reason_of
from outreach.settings import BounceSettings
from outreach.store import Conn
from outreach.store import emails as emails_store
from outreach.store import failures as store
from outreach.suppression import suppress

BLOCK_ACTOR = "sender-block"
"""Who pauses a mailbox on the block rule (``mailbox_events.actor``; alerted like the others)."""

KINDS = {"address": "hard_bounce", "sender": "sender_block", "transient": "soft_bounce",
         "none": "delivery_report"}
"""The inbound class of a failure report by its reason's owner (``inbound_messages.class``)."""


def kind_of(kind: str, owner: str | None, evidence: str = "", *, told: bool = True) -> str:
    """The inbound class of a verdict: the one place the effects decide a class from a verdict.

    A bounce's class follows its reason's owner (:data:`KINDS`); a DSN Action ``delayed``,
    ``delivered``, ``relayed`` or ``expanded`` is a ``delivery_report``; any other kind is returned.

    :param told: the report gave a status or a diagnostic; if not, the classifier's hard/soft stands."""
    if kind not in ("hard_bounce", "soft_bounce"):
        return kind
    if re.search(r"Action (delayed|delivered|relayed|expanded)\b", evidence, re.I):
        return "delivery_report"
    if owner is None or not told:
        return kind
    return KINDS[owner]


@dataclass(frozen=True)
class Effect:
    """What one failure changed: ``text`` (for people; addresses masked), ``applied`` (False: it
    was recorded before, or changes nothing), ``suppressed`` and ``paused`` (mailbox ids)."""

    text: str
    applied: bool = False
    suppressed: bool = False
    paused: tuple[int, ...] = ()


_BLOCKLIST = re.compile(
    r"(spamhaus|barracuda|spamcop|sorbs|uceprotect|spamrats|invaluement|surbl|abuseat|"
    r"cbl|psbl|mailspike|truncate\.gbudb|backscatterer|senderscore|\b[\w.-]*(dnsbl|rbl|bl)\."
    r"[\w.-]+\b)", re.I)


def likely_fix(reason: str, diagnostic: str | None, domain: str) -> str:
    """The fix a sender block most likely needs, in one sentence for the pause and its alert.

    :param reason: a ``sender`` reason of :data:`outreach.reasons.REASONS`.
    :param diagnostic: the server's words (a blocklist is named from them).
    :param domain: the sending domain.
    """
    text = diagnostic or ""
    if reason == "authfailure":
        return (f"check DMARC alignment of {domain}: SPF (the envelope domain) or DKIM (d=) must "
                f"pass and align with the From domain, and the DMARC record must exist")
    if reason == "blocked":
        m = _BLOCKLIST.search(text)
        where = f"the blocklist named in the diagnostic ({m.group(1)})" if m else (
            "the blocklist the diagnostic names (or the receiving host's own block)")
        return f"look the sending IP and {domain} up on {where} and request delisting"
    if reason == "requireptr":
        return ("give the sending IP a PTR record whose name resolves back to it "
                "(forward-confirmed reverse DNS)")
    if reason in ("securityerror", "failedstarttls"):
        return "the receiving host requires TLS or authentication our relay did not offer"
    if reason == "norelaying":
        return "the relay refuses to relay for us: check the mailbox's SMTP connection and login"
    if reason == "rejected":
        return f"the envelope sender is refused: check {domain}'s DNS (MX/A) and SPF"
    if reason == "mesgtoobig":
        return "the message is larger than the receiving host accepts"
    return "review the content and the sending reputation (the diagnostic says why)"


def apply_failure(conn: Conn, *, email_id: int, mailbox_id: int | None, address: str,
                  reason: str, status: str | None, diagnostic: str | None, source: str,
                  actor: str, settings: BounceSettings | None = None,
                  now: dt.datetime | None = None, owner: str | None = None) -> Effect:
    """Record one failure of ``address`` for our email ``email_id`` and apply its owner's effect, in the
    caller's transaction.

    :param mailbox_id: the mailbox that sent it (counts the block); ``None`` counts none.
    :param address: the failed recipient (put in the normal form here).
    :param reason: a key of :data:`outreach.reasons.REASONS` (unknown keys are transient).
    :param status: RFC 3463 (``"5.7.26"``), or ``None``.
    :param diagnostic: the server's words (kept at most 500 characters).
    :param source: unique per report: ``smtp:<email id>:<claim token>``, ``inbound:<inbound id>``,
        ``esp:<provider>:<event id>``.
    :param actor: recorded as the suppressing actor.
    :param now: a fixed clock (UTC) for the failure's moment and the rules' windows.
    :param owner: only when the report told no reason: the owner the classifier's verdict implies.
    :returns: what changed."""
    settings = settings or BounceSettings()
    owner = owner or owner_of(reason)
    address = normal_form(address).lower()
    diagnostic = diagnostic[:500] if diagnostic else None
    if owner == "none":
        return Effect(f"none: a delivery report ({reason}) changes nothing")
    store.failure_lock(conn, key=f"address:{address}")
    domain = ""
    if owner == "sender" and mailbox_id is not None:
        domain = next((b.domain for b in store.failure_block_counts(
            conn, mailbox_id=mailbox_id, window=dt.timedelta(0), now=now)), "")
        store.failure_lock(conn, key=f"domain:{domain}")
    failure_id = store.failure_record(
        conn, source=source, email_id=email_id, mailbox_id=mailbox_id, address=address,
        reason=reason, owner=owner, status=status, diagnostic=diagnostic, now=now)
    if failure_id is None:
        return Effect(f"none: this failure of email {email_id} was recorded before")
    store.failure_mark_email(conn, email_id=email_id, reason=reason, status=status,
                             diagnostic=diagnostic)
    what = f"{reason}{f' ({status})' if status else ''}"
    if owner == "address":
        added, cancelled = suppress(conn, address, "bounced", source, actor=actor)
        return Effect(f"suppressed {mask(address)} (bounced: {what}), {cancelled} queued cancelled"
                      if added else f"{what}: {mask(address)} was already suppressed",
                      True, added)
    if owner == "transient":
        days = store.failure_soft_days(
            conn, address=address, window=dt.timedelta(days=settings.soft_bounce_window_days),
            now=now)
        if days < settings.soft_bounce_days:
            return Effect(f"{what}: soft bounce recorded (day {days} of "
                          f"{settings.soft_bounce_days} within {settings.soft_bounce_window_days} "
                          f"days before {mask(address)} is suppressed)", True)
        added, cancelled = suppress(conn, address, "bounced",
                                    f"{source} (soft bounces on {days} days)", actor=actor)
        return Effect(f"suppressed {mask(address)} (bounced: {what}, soft bounces on {days} "
                      f"different days within {settings.soft_bounce_window_days}), "
                      f"{cancelled} queued cancelled" if added
                      else f"{what}: {mask(address)} was already suppressed", True, added)
    # owner == "sender": never the lead's fault.
    if mailbox_id is None:
        return Effect(f"{what}: sender block recorded; {mask(address)} not suppressed", True)
    paused = _pause_on_blocks(conn, mailbox_id, reason, status, diagnostic, settings, now)
    return Effect(f"{what}: sender block recorded; {mask(address)} not suppressed"
                  + (f"; mailbox(es) {list(paused)} paused ({BLOCK_ACTOR})" if paused else ""),
                  True, False, paused)


def _pause_on_blocks(conn: Conn, mailbox_id: int, reason: str, status: str | None,
                     diagnostic: str | None, settings: BounceSettings,
                     now: dt.datetime | None) -> tuple[int, ...]:
    """The block rule, decided on the counts in the database (under the domain's lock)."""
    counts = store.failure_block_counts(conn, mailbox_id=mailbox_id,
                                        window=dt.timedelta(hours=settings.block_window_hours),
                                        now=now)
    paused = []
    limit = settings.block_pause_count
    for c in counts:
        if c.status != "active":
            continue
        if c.id == mailbox_id and (c.authfailures or c.blocks >= limit):
            why = ("an authfailure (DMARC/SPF/DKIM) refusal" if c.authfailures else
                   f"{c.blocks} sender blocks within {settings.block_window_hours} h "
                   f"(threshold {limit})")
        elif c.domain_authfailures or c.domain_blocks >= limit:
            why = (f"an authfailure (DMARC/SPF/DKIM) refusal on {c.domain}"
                   if c.domain_authfailures else
                   f"{c.domain_blocks} sender blocks of {c.domain} within "
                   f"{settings.block_window_hours} h (threshold {limit})")
        else:
            continue
        text = (f"{why}; last: {reason}{f' {status}' if status else ''}"
                f"{f' {diagnostic[:200]!r}' if diagnostic else ''}. Likely fix: "
                f"{likely_fix(reason, diagnostic, c.domain)}")
        if pause(conn, c.id, text, BLOCK_ACTOR, now=now) is not None:
            paused.append(c.id)
            log.warning("mailbox %s (%s) paused by %s: %s", c.id, mask(c.address), BLOCK_ACTOR,
                        text)
    return tuple(paused)


def apply_reported_failure(conn: Conn, *, message_id: str, recipient: str, reason: str | None,
                           status: str | None, diagnostic: str | None, source: str, actor: str,
                           settings: BounceSettings | None = None,
                           now: dt.datetime | None = None) -> Effect:
    """Apply a failure reported after the handoff (a DSN, an ESP event) about our message
    ``message_id`` (without <>) and ``recipient``, in the caller's transaction.

    :param reason: a key of :data:`outreach.reasons.REASONS`, or ``None`` to derive it with
        :func:`outreach.reasons.reason_of` from ``status`` and ``diagnostic``.
    :param source: unique per report (``esp:<provider>:<event id>``): the same source twice
        applies once.
    :returns: what changed; nothing when ``message_id`` is none of ours (a forged or stray
        report, see the module docstring).
    """
    reason = reason if reason in REASONS else reason_of(status, diagnostic)
    found = emails_store.email_by_message_ids(conn, ids=[message_id.strip("<>").lower()])
    if not found:
        return Effect("none: the report names none of our Message-IDs (unverified: nothing "
                      "changes)")
    email = found[0]
    address = (email.email or recipient).strip().lower()
    return apply_failure(conn, email_id=email.id, mailbox_id=email.mailbox_id, address=address,
                         reason=reason, status=status, diagnostic=diagnostic, source=source,
                         actor=actor, settings=settings, now=now)
