"""Classifying one inbound message: a pure function from its bytes to a class and its evidence.

The order is the rule (issues 11 and 23), the first match decides: complaint, automated (a bounce
by its reason's owner, else an auto-reply or ``unmatched``; decided before any reply matching),
unsubscribe, auto-reply, reply. Each rule and the corpus figures:
docs/explanation/inbound-classification.md. No database or network here; the effects live in
:mod:`outreach.inbox` and :mod:`outreach.bounces`."""

from __future__ import annotations

import email
import email.errors
import hashlib
import re
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses, parseaddr

from outreach.dsn import DAEMONS, Failure, text_of
from outreach.dsn import complaint as bounce_complaint
from outreach.dsn import failures as bounce_failures
from outreach.reasons import Owner

BOUNCE_SENDERS = frozenset({"mailer-daemon", "postmaster", "mail-daemon", "mailerdaemon"})
BOUNCE_SUBJECT = re.compile(
    r"(undeliver|undelivered|delivery (status notification|failure|has failed)|"
    r"mail delivery (failed|failure|system)|returned mail|failure notice|"
    r"delivery report|non[- ]?delivery|could not be delivered|unzustellbar|delivery status|"
    r"mail system error|returned mail|メールエラー|エラー通知|不達|are not member|"
    r"AWS Notification Message)", re.I)
AUTO_REPLY_SUBJECT = re.compile(
    r"^\s*(re:\s*)?(out of (the )?office|automatic reply|auto[- ]?reply|auto[- ]?response|"
    r"autoresponse|abwesenheitsnotiz|automatische antwort|r[ée]ponse automatique|"
    r"absence( notice)?\s*:|respuesta autom[áa]tica|risposta automatica|on vacation|away from (the )?office|"
    r"i am (currently )?out of)", re.I)
"""Out-of-office subjects as Outlook, Gmail, Exchange and Apple Mail write them (several
languages); matched at the start, after an optional ``Re:``."""
UNSUBSCRIBE_LINE = re.compile(
    r"^\s*(please\s*,?\s*)?(unsubscribe( me)?|remove me|take me off|opt[- ]?(me )?out|"
    r"(do not|don't|dont) (contact|e-?mail|mail|write to) me|"
    r"stop (e-?mailing|sending|contacting|writing to) me|no more e-?mails|"
    r"(bitte\s+)?(abmelden|austragen)|d[ée]sinscri(re|vez)-?(moi)?)\b"
    r"|^\s*stop\s*[.!]*\s*$", re.I)
"""A first line that asks to be taken off the list: "unsubscribe", "Please remove me from your
list", "Take me off", "opt out", "Don't email me", "Stop emailing me", "STOP" (alone: "Stop by
our booth" is a reply), "Abmelden", "désinscrire"…"""
AUTO_PRECEDENCE = frozenset({"auto_reply", "bulk", "junk"})
_MSGID = re.compile(r"<([^<>\s]+@[^<>\s]+)>")
_BODY_MSGID = re.compile(r"^\s*Message-ID:\s*<([^<>\s]+@[^<>\s]+)>", re.I | re.M)
_TOKEN = re.compile(r"\bunsubscribe\s+([A-Za-z0-9_\-.]{10,})", re.I)
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True)
class Inbound:
    """What the reader needs of one message (lower-case addresses and Message-IDs, without <>).

    ``message_id`` (``sha256:<hex>`` when missing or longer than :data:`MAX_MESSAGE_ID`),
    ``from_address`` ('' when none), ``recipients`` (To, Cc, Delivered-To, X-Original-To),
    ``subject`` (≤ 200 characters), ``references`` (In-Reply-To first, then References newest
    first), ``in_reply_to`` and ``first_line`` (the first non-empty, non-quoted line)."""

    message_id: str
    from_address: str
    recipients: tuple[str, ...]
    subject: str
    references: tuple[str, ...]
    first_line: str
    in_reply_to: tuple[str, ...] = ()


@dataclass(frozen=True)
class Classified:
    """The verdict: ``kind``, ``evidence`` (which header or part decided) and what the effect needs.

    ``addresses`` (bounced or complaining, lower-case), ``original_ids`` (the enclosed original's
    Message-IDs), ``dsn_status`` (RFC 3463), ``token`` (a mailto unsubscribe's), and for bounces and
    complaints ``reason`` (:data:`outreach.reasons.REASONS`), ``owner`` and ``diagnostic`` (≤ 500
    characters, unmasked: mask before logging)."""

    kind: str
    evidence: str
    addresses: tuple[str, ...] = ()
    original_ids: tuple[str, ...] = ()
    dsn_status: str | None = None
    token: str | None = None
    extra: dict = field(default_factory=dict)
    reason: str | None = None
    owner: Owner | None = None
    diagnostic: str | None = None
    failures: tuple[Failure, ...] = ()


MAX_MESSAGE_ID = 998
"""Bytes of a Message-ID kept as it is; a longer one is stored as ``sha256:<hex>`` of itself."""


def _addr(value: str | None) -> str:
    return parseaddr(value or "")[1].strip().lower()


def _ids(value: str | None) -> list[str]:
    return [m.lower() for m in _MSGID.findall(value or "")]


def parse(raw: bytes) -> tuple[Inbound, Message]:
    """Parse a message's bytes; return ``(inbound, message)``, the compat32 :mod:`email` object.

    Compat32 only: the modern policy as well took half the classifier's time (issue 23)."""
    compat = email.message_from_bytes(raw)
    mid = _ids(str(compat.get("Message-ID", "")))
    message_id = mid[0] if mid else "sha256:" + hashlib.sha256(raw).hexdigest()
    if len(message_id.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_ID:
        # Longer than any real one (RFC 5322 §2.1.1 lines are at most 998 characters) and than
        # a btree index entry holds (about 2700 bytes): the UNIQUE key would fail the message's
        # transaction on every run. Its hash identifies it as well.
        message_id = "sha256:" + hashlib.sha256(message_id.encode("utf-8", "surrogatepass")).hexdigest()
    in_reply_to = _ids(str(compat.get("In-Reply-To", "")))
    refs = in_reply_to + list(reversed(_ids(str(compat.get("References", "")))))
    seen: set[str] = set()
    references = tuple(r for r in refs if not (r in seen or seen.add(r)))
    recipients = tuple(a.lower() for _, a in getaddresses(
        [str(v) for h in ("To", "Cc", "Delivered-To", "X-Original-To", "Envelope-To")
         for v in compat.get_all(h, [])]) if a)
    subject = " ".join(decoded_header(compat.get("Subject")).split())[:200]
    return (Inbound(message_id, _addr(str(compat.get("From", ""))), recipients, subject,
                    references, first_line(compat), tuple(in_reply_to)), compat)


def decoded_header(value: object) -> str:
    """A header's text with its RFC 2047 encoded words decoded ('' for none); an unknown
    charset or a broken word leaves the raw text."""
    if value is None:
        return ""
    try:
        return str(make_header(decode_header(str(value))))
    except (LookupError, UnicodeError, ValueError, email.errors.HeaderParseError):
        return str(value)


def first_line(msg: Message) -> str:
    """Return the first non-empty line of the message's text (the first plain-text part that is
    not an attachment, else the first HTML one without tags; never inside an enclosed message)
    that is not quoted (``>``) — what a person typed at the top of a reply; '' when none."""
    lines = leading_lines(msg, 1)
    return lines[0][:200] if lines else ""


def leading_lines(msg: Message, count: int) -> list[str]:
    """Return the first ``count`` non-empty, non-quoted (``>``) lines of the message's text,
    stripped (the part :func:`first_line` reads); ``[]`` when it has none. Used for the reply
    notice's excerpt (:mod:`outreach.notify`)."""
    plain: Message | None = None
    html: Message | None = None
    inside: set[int] = set()
    for part in msg.walk():
        if id(part) in inside:
            continue
        ctype = part.get_content_type()
        if ctype == "message/rfc822":
            inside.update(id(p) for p in part.walk() if p is not part)
            continue
        if part.is_multipart() or part.get_filename() is not None:
            continue
        if ctype == "text/plain" and plain is None:
            plain = part
        elif ctype == "text/html" and html is None:
            html = part
    part = plain or html
    if part is None:
        return []
    text = text_of(part)
    if part is html:
        text = _TAG.sub("\n", text)
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(">"):
            out.append(line)
            if len(out) >= count:
                break
    return out


def _report_type(compat: Message) -> str:
    if compat.get_content_type() != "multipart/report":
        return ""
    return (compat.get_param("report-type") or "").lower()


def _enclosed_ids(compat: Message, own: str) -> tuple[str, ...]:
    """Message-IDs of the original message a report or bounce encloses (message/rfc822,
    text/rfc822-headers, or quoted in the text), ours first in order; never the report's own."""
    found: list[str] = []
    for part in compat.walk():
        ctype = part.get_content_type()
        if ctype in ("message/rfc822", "message/rfc822-headers"):
            payload = part.get_payload()
            inner = payload[0] if isinstance(payload, list) and payload else None
            if isinstance(inner, Message):
                found += _ids(str(inner.get("Message-ID", "")))
        elif ctype in ("text/rfc822-headers", "text/plain"):
            try:
                text = part.get_payload(decode=True) or b""
            except (TypeError, ValueError):
                continue
            found += [m.lower() for m in _BODY_MSGID.findall(text.decode("utf-8", "replace"))]
    seen: set[str] = {own}
    return tuple(i for i in found if not (i in seen or seen.add(i)))


AUTOMATED_HEADERS = ("X-Failed-Recipients", "X-Autoreply", "X-Autorespond", "X-Autoresponder",
                     "X-Auto-Response-Suppress", "X-Apple-Unsubscribe", "X-MLServer")
"""Headers only machines write; any of them makes a message automated (never a human reply)."""


def automated(inbound: Inbound, compat: Message) -> str:
    """Return why this message was written by a machine (the evidence), or '' when it may be a person's.

    ``multipart/report`` (RFC 6522), a null reverse-path (RFC 5321 §4.5.5), a daemon sender,
    ``Auto-Submitted`` not ``no`` (RFC 3834), :data:`AUTOMATED_HEADERS`, a delivery-failure subject.
    Decided before reply matching (issue 23)."""
    if compat.get_content_type() == "multipart/report":
        return f"Content-Type: multipart/report; report-type={_report_type(compat) or '?'}"
    for part in compat.walk():
        if part.get_content_type() in ("message/delivery-status", "message/feedback-report"):
            return f"a {part.get_content_type()} part"
    if str(compat.get("Return-Path", "")).strip() in ("<>", "<MAILER-DAEMON>"):
        return f"Return-Path: {str(compat.get('Return-Path')).strip()} (null reverse-path)"
    local = inbound.from_address.partition("@")[0]
    if DAEMONS.match(local) or str(compat.get("From", "")).strip().endswith("<>"):
        return f"From: {local}@…"
    auto = str(compat.get("Auto-Submitted", "")).strip()
    if auto and auto.split(";")[0].strip().lower() != "no":
        return f"Auto-Submitted: {auto[:40]} (RFC 3834)"
    for header in AUTOMATED_HEADERS:
        if compat.get(header) is not None:
            return f"{header}: {str(compat.get(header))[:40]}"
    if BOUNCE_SUBJECT.search(inbound.subject):
        return f"Subject: {inbound.subject[:60]}"
    return ""


_KIND_BY_OWNER = {"address": "hard_bounce", "transient": "soft_bounce", "sender": "sender_block",
                  "none": "delivery_report"}
_OWNER_ORDER = ("address", "sender", "transient", "none")


def _classify_bounce(inbound: Inbound, compat: Message, why: str) -> Classified | None:
    found, how = bounce_failures(compat)
    if not found:
        return None
    failed = [f for f in found if f.owner != "none"]
    lead = min(failed or found, key=lambda f: _OWNER_ORDER.index(f.owner))
    original = _enclosed_ids(compat, inbound.message_id)
    evidence = (f"{why}; {how}: Status {lead.status or '(none)'}, Action {lead.action}, "
                f"reason {lead.reason}")
    return Classified(_KIND_BY_OWNER[lead.owner], evidence, tuple(f.address for f in failed),
                      original, lead.status, reason=lead.reason, owner=lead.owner,
                      diagnostic=lead.diagnostic, failures=tuple(found))


def _classify_complaint(inbound: Inbound, compat: Message) -> Classified | None:
    found = bounce_complaint(compat, inbound.subject)
    if found is None:
        return None
    addresses, evidence, feedback_type = found
    return Classified("complaint", evidence, addresses, _enclosed_ids(compat, inbound.message_id),
                      reason="feedback", owner="none", extra={"feedback_type": feedback_type})


def _classify_unsubscribe(inbound: Inbound) -> Classified | None:
    to_mailto = [r for r in inbound.recipients if r.partition("@")[0] == "unsubscribe"]
    if to_mailto:
        m = _TOKEN.search(inbound.subject)
        return Classified("unsubscribe", f"sent to {to_mailto[0].partition('@')[0]}@"
                          f"{to_mailto[0].partition('@')[2]} (List-Unsubscribe mailto)"
                          + ("; token in the subject" if m else ""),
                          (inbound.from_address,) if inbound.from_address else (),
                          token=m.group(1) if m else None)
    if inbound.first_line and UNSUBSCRIBE_LINE.match(inbound.first_line):
        return Classified("unsubscribe", f"first line: {inbound.first_line[:60]!r}",
                          (inbound.from_address,) if inbound.from_address else ())
    return None


def _classify_auto_reply(inbound: Inbound, compat: Message) -> Classified | None:
    auto = str(compat.get("Auto-Submitted", "")).strip()
    if auto and auto.split(";")[0].strip().lower() != "no":
        return Classified("auto_reply", f"Auto-Submitted: {auto[:40]} (RFC 3834)")
    for header in ("X-Autoreply", "X-Autorespond", "X-Autoresponder", "X-Auto-Response-Suppress"):
        if compat.get(header) is not None:
            return Classified("auto_reply", f"{header}: {str(compat.get(header))[:40]}")
    precedence = str(compat.get("Precedence", "")).strip().lower()
    if precedence in AUTO_PRECEDENCE:
        return Classified("auto_reply", f"Precedence: {precedence}")
    if AUTO_REPLY_SUBJECT.match(inbound.subject):
        return Classified("auto_reply", f"Subject: {inbound.subject[:60]}")
    return None


def classify(raw: bytes) -> tuple[Inbound, Classified]:
    """Classify one message (see the module docstring for the order).

    :param raw: the message as the IMAP server returned it (``BODY.PEEK[]``).
    :returns: ``(inbound, verdict)``; a verdict of kind ``reply`` still has to be matched to a
        lead (:mod:`outreach.inbox`), and becomes ``unmatched`` when it cannot be.
    """
    inbound, compat = parse(raw)
    why = automated(inbound, compat)
    verdict = _classify_complaint(inbound, compat)
    if verdict is None and why:
        verdict = _classify_bounce(inbound, compat, why) or _classify_auto_reply(inbound, compat) \
            or Classified("unmatched", f"{why}; automated, but no recipient or report found: "
                          "never a reply, no effect")
    verdict = verdict or _classify_unsubscribe(inbound) or _classify_auto_reply(inbound, compat)
    if verdict is None:
        verdict = Classified("reply", "a message from a person (no bounce, report or "
                             "auto-reply header)")
    return inbound, verdict
