"""Reading a bounce or a complaint: who failed or complained, with what status and words.

Pure functions over a compat32 :class:`~email.message.Message` (what ``flufl.bounce`` reads),
used by :mod:`outreach.inbound` once a message is known to be automated. The rules in their
order (SES notifications, RFC 3464 fields, X-Failed-Recipients, flufl.bounce, the notice's
text, the returned message's To) and the complaint formats (RFC 5965 ARF, JMRP, SES, Apple one-tap):
docs/explanation/inbound-classification.md#finding-the-failed-recipients."""

from __future__ import annotations

import email
import json
import logging
import re
from dataclasses import dataclass
from email.message import Message
from email.utils import getaddresses, parseaddr

from outreach.reasons import Owner, looked_up_by_the_mta, owner_of, reason_of, status_in

# flufl.bounce logs "Running detector: …" at INFO for each of its ~30 detectors on every message:
# thousands of lines in a task log (issue 23). Its warnings still show.
logging.getLogger("flufl.bounce").setLevel(logging.WARNING)

ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*"
                     r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")
"""An address as bounces write it (``user@host.tld``; no quoted local parts, no bare hosts)."""
_ONLY_ADDRESS = re.compile(rf"^{ADDRESS.pattern}$")
DAEMONS = re.compile(r"^(mailer-?daemon|mail-daemon|post_?master|mail-?delivery(-?system)?|"
                     r"no-?reply|donotreply|do-not-reply|root|abuse|bounces?|mdaemon|"
                     r"mailadmin|sysadmin|nobody)([+=.-].*)?$", re.I)
"""Local parts of the machines that send bounces: never the failed recipient."""
RETURNED = re.compile(
    r"^[\s>*=_#-]*(original message|message headers follow|(this is )?a copy of (the|your) "
    r"(original )?message|below (this line )?is a copy|the original message (follows|headers)|"
    r"returned message|unsent message|original message (header|follows)|"
    r"headers of the original|\[?original message|your message (follows|reads)|"
    r"message text follows|content-type: (message|text)/rfc822|rfc822 header|"
    r"the headers of your message|this is the original|the original e?-?mail|"
    r"original mail info|original mail as follows|---+ ?(message|mail) ?(header|body)|"
    r"---+ ?original)", re.I | re.M)
"""The line that starts the returned message inside a plain-text bounce."""
_HEADER_LINE = re.compile(r"^(Received|Return-Path|Message-I[Dd]|Date|From|To|Subject|"
                          r"MIME-Version|X-[\w-]+|DKIM-Signature|Content-Type):[ \t]", re.M)
_ORIGINAL_HEADER = re.compile(r"^(Message-I[Dd]|Received|Return-Path|MIME-Version|Content-Type|"
                              r"DKIM-Signature|X-Mailer):", re.M | re.I)
"""A header that only a returned message's header block has (a notice's summary "To: … Subject: …
Date: …" has none of them)."""
_DSN_FIELD = re.compile(r"^(Final-Recipient|Original-Recipient|Action|Status|Diagnostic-Code|"
                        r"Remote-MTA|X-Actual-Recipient)[ \t]*:[ \t]*(.*(?:\n[ \t]+.*)*)", re.I | re.M)
_CODE = re.compile(r"(?<![\d.])([245]\d\d)(?=[ -])")
_MSGID_ANY = re.compile(r"<([^<>\s]+@[^<>\s]+)>")
_NOT_FAILED = frozenset({"delivered", "relayed", "expanded", "delayed"})


@dataclass(frozen=True)
class Failure:
    """One recipient of a bounce: ``address`` (lower-case), ``status`` (RFC 3463, or None),
    ``reason`` (a key of :data:`outreach.reasons.REASONS`), its ``owner``, ``diagnostic`` (the
    server's words, ≤ 500 characters) and the DSN's ``action`` (``failed``, ``delayed``,
    ``delivered``, ``relayed``, ``expanded``; ``failed`` for a bounce without DSN fields)."""

    address: str
    status: str | None
    reason: str
    owner: Owner
    diagnostic: str | None
    action: str = "failed"


def text_of(part: Message) -> str:
    """The decoded text of a leaf part: its transfer encoding undone, its charset decoded (an
    unknown charset read as Latin-1, bad bytes replaced) — never raises."""
    try:
        data = part.get_payload(decode=True)
    except Exception:  # noqa: BLE001 - broken MIME: read the raw payload instead
        data = None
    if not isinstance(data, bytes):
        payload = part.get_payload()
        return payload if isinstance(payload, str) else ""
    charset = part.get_content_charset() or "utf-8"
    for cs in (charset, "utf-8", "latin-1"):
        try:
            return data.decode(cs)
        except (LookupError, UnicodeDecodeError):
            continue
    return data.decode("latin-1")


_QUOTED = re.compile(r'"[^"\r\n]+"@[A-Za-z0-9.-]+\.[A-Za-z0-9-]+')
_ATEXT_ADDRESS = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-][A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]*@"
                            r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*"
                            r"[A-Za-z0-9])?)+")


def _clean(address: str) -> str:
    """The address a DSN field or header names (a quoted local part and RFC 5322 atext such as
    ``=?utf-8?…?=@host`` kept as written), or '' when it is none (a route, a pipe, X.400)."""
    address = address.strip()
    if address.lower().startswith("rfc822;"):
        address = address[7:].strip()
    quoted = _QUOTED.search(address)
    if quoted:
        return quoted.group(0).lower()
    address = address.strip("<>\"'.,;:()[] ").lower()
    m = _ATEXT_ADDRESS.findall(address)
    return m[-1].lower().rstrip(".") if m else ""


@dataclass
class _Parts:
    notice: str         # the human-readable text of the bounce (before any returned message)
    original: Message | None   # the returned message's headers (and body when enclosed)
    texts: list[str]    # every text part's text (for DSN fields written as text)


def _parts(compat: Message) -> _Parts:
    notice: list[str] = []
    texts: list[str] = []
    original: Message | None = None
    inside: set[int] = set()
    for part in compat.walk():
        if id(part) in inside:
            continue
        ctype = part.get_content_type()
        if ctype == "message/rfc822" or ctype == "message/rfc822-headers":
            payload = part.get_payload()
            inner = payload[0] if isinstance(payload, list) and payload else None
            if isinstance(inner, Message):
                original = original or inner
                inside.update(id(p) for p in inner.walk())
            continue
        if ctype in ("text/rfc822-headers",):
            original = original or email.message_from_string(text_of(part))
            continue
        if part.is_multipart() or ctype == "message/delivery-status":
            continue
        if ctype.startswith("multipart/"):
            ctype = "text/plain"  # broken MIME: a multipart whose boundary is never found
        if ctype.startswith("text/") or (ctype == "application/octet-stream" and part is compat):
            text = text_of(part)
            if ctype == "text/html":
                text = re.sub(r"<[^>]*>", " ", text)
            texts.append(text)
            if part.get_filename() is None:
                notice.append(text)
    body = "\n".join(notice)
    cut = RETURNED.search(body)
    header = _HEADER_LINE.search(body)
    # A header block (two header lines in a row, or a Received: / Return-Path: line, which no
    # notice starts a line with) also starts a returned message.
    while header is not None and not header.group(1).startswith(("Received", "Return-Path")) and \
            not (_HEADER_LINE.match(body, body.find("\n", header.end()) + 1) and _ORIGINAL_HEADER.search(
                body, header.start(), header.start() + 600)):
        header = _HEADER_LINE.search(body, header.end())
    ends = [m.start() for m in (cut, header) if m is not None]
    if ends:
        rest = body[min(ends):]
        body = body[:min(ends)]
        if original is None:
            start = _HEADER_LINE.search(rest)
            if start is not None:
                original = email.message_from_string(rest[start.start():])
    return _Parts(body, original, texts)


def _dsn_blocks(compat: Message, texts: list[str]) -> list[dict[str, str]]:
    """Per-recipient RFC 3464 fields, from ``message/delivery-status`` parts, else from text."""
    raw: list[str] = []
    inside: set[int] = set()  # the returned message may be a bounce itself: not ours to read
    for part in compat.walk():
        if id(part) in inside:
            continue
        if part.get_content_type() == "message/rfc822":
            inside.update(id(p) for p in part.walk() if p is not part)
        elif part.get_content_type() == "message/delivery-status":
            payload = part.get_payload()
            if isinstance(payload, list):
                raw += ["\n".join(f"{k}: {v}" for k, v in block.items()) + "\n\n"
                        for block in payload if isinstance(block, Message)]
            else:
                raw.append(text_of(part))
    if not any("final-recipient" in r.lower() or "original-recipient" in r.lower() for r in raw):
        raw = [t for t in texts if re.search(r"^(Final|Original)-Recipient\s*:", t, re.I | re.M)]
    out: list[dict[str, str]] = []
    for block in (b for text in raw for b in re.split(r"\n[ \t]*\n", text)):
        current: dict[str, str] = {}
        for m in _DSN_FIELD.finditer(block):
            key, value = m.group(1).lower(), " ".join(m.group(2).split())
            if key in current and key in ("final-recipient", "original-recipient"):
                out.append(current)  # no blank line between two recipients (broken text)
                current = {}
            current.setdefault(key, value)
        if current:
            out.append(current)
    return [b for b in out if "final-recipient" in b or "original-recipient" in b]


def _excluded(compat: Message, parts: _Parts) -> set[str]:
    """Addresses that are never the failed recipient: the bounce's From/To/Reply-To, the
    original's From/Sender/Return-Path, and every Message-ID seen."""
    out: set[str] = set()
    for msg in (compat, parts.original):
        if msg is None:
            continue
        for h in ("From", "Sender", "Reply-To", "Return-Path") + (("To",) if msg is compat else ()):
            out.update(a.lower() for _, a in getaddresses([str(v) for v in msg.get_all(h, [])]) if a)
        for h in ("Message-ID", "In-Reply-To", "References"):
            out.update(i.lower() for i in _MSGID_ANY.findall(str(msg.get(h, "") or "")))
    # A list manager's control addresses in its own List-* headers (RFC 2369; fml's "-ctl"),
    # which its notice tells the sender to write to; List-Post (the list itself) stays.
    for h in ("List-Subscribe", "List-Unsubscribe", "List-Help", "List-Owner"):
        for v in compat.get_all(h, []):
            out.update(a.lower() for a in re.findall(r"mailto:([^?>\s]+@[^?>\s]+)", str(v), re.I))
    return out


def _usable(address: str, excluded: set[str]) -> bool:
    return bool(address) and address not in excluded and not DAEMONS.match(address.partition("@")[0])


def _around(notice: str, address: str, others: tuple[str, ...] = ()) -> str:
    """The diagnostic words of a plain-text bounce for ``address``: from its line to the end
    of the next paragraph, or to the next of ``others`` (the other failed recipients); when
    that says little (the address alone), the 300 characters above it too; the whole notice
    when it is not named (at most 500 characters, whitespace folded)."""
    low = notice.lower()
    hits = [m.start() for m in re.finditer(re.escape(address), low)]
    if not hits:
        return " ".join(notice.split())[:500]
    # Not the "To: <address>" of a summary of the returned message, when it is named again.
    i = next((h for h in hits if not re.match(r"\s*(to|cc|from|subject)\s*:", low[
        low.rfind("\n", 0, h) + 1:h])), hits[0])
    start = low.rfind("\n", 0, i) + 1
    end = i
    for _ in range(4):  # this paragraph and the next ones, until there are words
        nxt = low.find("\n\n", end + 1)
        while nxt >= 0 and nxt + 2 < len(low) and low[nxt + 2] == "\n":
            nxt += 1
        end = nxt if nxt >= 0 else len(notice)
        if len(re.findall(r"[^\W\d_]{2,}", notice[i + len(address):end])) >= 4:
            break
    for other in others:
        j = low.find(other, i + len(address))
        if other != address and 0 <= j < end:
            end = j
    text = notice[start:end]
    own = text.lower().replace(address, " ")
    if not _CODE.search(own) and len(re.findall(r"[^\W\d_]{2,}", own)) < 5:
        text = notice[max(0, i - 300):end]
    return " ".join(text.split())[:500]


_AFTER_DATA = re.compile(r"end of data|after data|data command|>>> data|after end of data|"
                         r"in reply to (end of )?data", re.I)


# Where a notice tells the SMTP command its failure answered, most telling first: a session
# transcript's last ">>> COMMAND" (Sendmail), Postfix's "(in reply to RCPT TO command)", Exim's
# "after RCPT TO:", qmail's "does not like recipient", then the word RCPT itself (sisimai's
# Sisimai::SMTP::Command reads the upper-case command names the same way).
_TRANSCRIPT = re.compile(r"^\s*>>>\s*(MAIL|RCPT|DATA)\b", re.I | re.M)
_IN_REPLY = re.compile(r"(?:in reply to|after)\s+(?:the\s+)?(end of data|data|rcpt|mail)\b", re.I)


def _stage(text: str) -> str | None:
    """The SMTP command (``"MAIL"``, ``"RCPT"``, ``"DATA"``) a notice says its failure answered,
    or ``None`` when it does not say (see ``_TRANSCRIPT`` and ``_IN_REPLY``)."""
    said = _TRANSCRIPT.findall(text)
    if said:
        return said[-1].upper()
    m = _IN_REPLY.search(text)
    if m:
        return "DATA" if "data" in m.group(1).lower() else m.group(1).upper()
    # Oracle Messaging Server: "Remote SMTP server has rejected address" is its RCPT refusal.
    if re.search(r"\bRCPT\b|does not like recipient|server has rejected address", text):
        return "RCPT"
    return "DATA" if _AFTER_DATA.search(text) else None


def _failure(address: str, status: str | None, diagnostic: str | None, action: str = "failed",
             context: str = "", whole: str = "", stage: str | None = None,
             explanation: str = "") -> Failure:
    status = status or status_in(diagnostic)
    m = _CODE.search(diagnostic or "")
    reason = reason_of(status, diagnostic, int(m.group(1)) if m else None)
    if reason == "delayed" and action == "failed":
        reason = "undefined"  # a failure whose words say nothing: never "delayed"
    if reason in ("undefined", "delayed") and whole and whole != diagnostic:
        # The words are elsewhere in a notice that names one recipient (above its address).
        reason = reason_of(status, whole, int(m.group(1)) if m else None)
        reason = "undefined" if reason == "delayed" and action == "failed" else reason
    said = f"{diagnostic} {context}"
    at_rcpt = re.search(r"\brcpt|does not like recipient", said, re.I)
    if reason == "userunknown" and not at_rcpt and status and status[2] in "237":
        # "User unknown" under a mailbox (5.2), system (5.3) or policy (5.7) status, and no sign
        # of RCPT: a filter's answer to the message (sisimai: "filtered"), not proof the
        # address is gone.
        reason = "filtered"
    if reason == "userunknown" and _AFTER_DATA.search(said) and not at_rcpt and not (
            status or "").startswith("5.1."):
        # Refused after DATA, when every recipient had been accepted: the content was refused,
        # not the address (sisimai calls it "filtered").
        reason = "filtered"
    if reason == "userunknown" and explanation and \
            reason_of(None, explanation) in ("mailboxfull", "suspend"):
        # The notice's own words for its only recipient say the mailbox is full or disabled
        # ("Not enough disk space", "The user(s) account is disabled") under a relayed
        # "User unknown": sisimai reads the notice too, and so the lead stays.
        reason = reason_of(None, explanation)
    if reason == "userunknown" and (status or status_in(said)) in (None, "5.0.0") and \
            stage != "RCPT" and not looked_up_by_the_mta(said):
        # A bare "No such user" with no status that says more and no sign of RCPT: a gateway's
        # filter (McAfee, SurfControl, m-FILTER, X1/X2) says it of mail it refuses, so sisimai
        # calls it "filtered" (Sisimai::Reason::Filtered: user-unknown words at any stage but
        # CONN/EHLO/MAIL/RCPT); a lead is never suppressed on it.
        reason = "filtered"
    if address.endswith("@googlegroups.com") and owner_of(reason) == "transient":
        reason = "rejected"  # Google Groups refuses a post from a non-member: our sender
    if action in _NOT_FAILED:
        reason = "delayed" if action == "delayed" else "delivered"
    owner: Owner = "none" if action in _NOT_FAILED else owner_of(reason)
    return Failure(address, status, reason, owner,
                   " ".join(diagnostic.split())[:500] if diagnostic else None, action)


def failures(compat: Message) -> tuple[tuple[Failure, ...], str]:
    """Find the recipients of a bounce (see the module docstring for the order).

    :returns: ``(failures, evidence)``: one :class:`Failure` per recipient (every recipient a
        DSN names, delivered and delayed ones too: their ``owner`` is ``none``), and which rule
        found them; ``((), "")`` when none finds an address.
    """
    parts = _parts(compat)
    excluded = _excluded(compat, parts)
    notice = parts.notice
    seen: dict[str, Failure] = {}
    ses = _ses(parts.texts, "Bounce")
    if ses is not None:
        kind = str((ses.get("bounce") or {}).get("bounceType") or "")
        for item in (ses.get("bounce") or {}).get("bouncedRecipients") or []:
            if not isinstance(item, dict) or not _clean(str(item.get("emailAddress", ""))):
                continue
            address = _clean(str(item["emailAddress"]))
            diagnostic = str(item.get("diagnosticCode") or "") or f"SES bounceType {kind}"
            seen[address] = _failure(address, str(item.get("status") or "") or None, diagnostic,
                                     "failed")
        if seen:
            return tuple(seen.values()), f"Amazon SES bounce notification ({kind})"

    blocks = _dsn_blocks(compat, parts.texts)
    named = tuple(a for a in (_clean(b.get("final-recipient", "")) or _clean(
        b.get("original-recipient", "")) for b in blocks) if a)
    for b in blocks:
        address = _clean(b.get("final-recipient", "")) or _clean(b.get("original-recipient", ""))
        if not address or address in seen:
            continue
        action = (b.get("action") or "failed").split()[0].lower()
        status = (b.get("status") or "").split()[0] if b.get("status") else None
        if status and not re.match(r"^[245]\.\d{1,3}\.\d{1,3}$", status):
            status = status_in(status)
        diagnostic = b.get("diagnostic-code", "").partition(";")[2].strip() or b.get(
            "diagnostic-code") or None
        if not diagnostic or len(diagnostic) < 12:
            diagnostic = " ".join(filter(None, [diagnostic, _around(notice, address, named)])) or None
        if status and diagnostic and status_in(diagnostic) not in (None, status) and \
                status_in(diagnostic)[0] == status[0]:
            # The server's own code in its words ("552 5.2.2 Over quota") is more precise than
            # the reporting MTA's Status (often 5.0.0, or a 5.1.1 for every failure).
            status = status_in(diagnostic)
        seen[address] = _failure(address, status, diagnostic, action,
                                 context=_around(notice, address, named),
                                 stage=_stage(diagnostic or "") or _stage(notice),
                                 explanation=notice if len(named) == 1 else "")
    if seen:
        return tuple(seen.values()), "RFC 3464 delivery-status fields"

    header = compat.get_all("X-Failed-Recipients", [])
    found = [_clean(a) for v in header for a in str(v).split(",")]
    found = [a for a in found if a]
    evidence = "X-Failed-Recipients"
    listed = _exim_listed(notice, excluded)
    if found and listed and not set(found) & set(listed):
        # Exim lists each failed address in its notice; when the header names others, the
        # notice (what Exim tried) is the one sisimai reads too.
        found, evidence = listed, "the addresses Exim's notice lists as failed"
    if not found:
        from flufl.bounce import all_failures

        try:
            temporary, permanent = all_failures(compat)
        except Exception:  # noqa: BLE001 - a detector choking on odd input finds nothing
            temporary, permanent = set(), set()
        found = []
        for a in list(permanent) + list(temporary):
            text = a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a)
            address = text.strip().strip("<>").lower()
            if _ONLY_ADDRESS.match(address) and _usable(address, excluded) and \
                    not _in_url(notice, address):
                found.append(address)
        evidence = "flufl.bounce detectors"
    if not found:
        found, evidence = _named(notice, compat, excluded), "addresses named by the notice's text"
    if not found and parts.original is not None:
        found = [a.lower() for _, a in getaddresses([str(v) for v in parts.original.get_all(
            "To", [])]) if a and _usable(a.lower(), set())]
        evidence = "the returned message's To"
    found = list(dict.fromkeys(found))
    if not found:
        return (), ""
    others = tuple(found)
    whole = " ".join(notice.split())[:1500] if len(found) == 1 else ""
    stage = _stage(notice)
    return tuple(_failure(a, None, _around(notice, a, others) or None, context=notice, whole=whole,
                          stage=stage) for a in found), evidence


# Exim: "The following address(es) failed:" then each address on its own line, indented by
# two spaces, its SMTP error indented further.
_EXIM_FAILED = re.compile(r"following address(?:\(es\))? failed:[ \t]*\n((?:[ \t]*\n)?(?:[ \t]+\S.*\n?)+)",
                          re.I)


def _exim_listed(notice: str, excluded: set[str]) -> list[str]:
    """The addresses an Exim notice lists under "The following address(es) failed:"."""
    m = _EXIM_FAILED.search(notice.replace("\r\n", "\n"))
    if not m:
        return []
    lines = re.findall(r"^ {2}(\S+@\S+?)[:\s]*$", m.group(1), re.M)
    return [a for a in (_clean(x) for x in lines) if a and a not in excluded]


# "first@x <second@y>": an address written as the display name of the one in angle brackets.
_AS_DISPLAY_NAME = re.compile(r"\S+@\S+(?=[ \t]+<[^<>\s]+@[^<>\s]+>)")


_RCPT_TO = re.compile(r"^\s*(?:RCPT TO|Original-Recipient|Recipient address|To)\s*:\s*<?(\S+?@[^\s>]+)", re.I | re.M)
_SENDER_LINE = re.compile(r"^\s*(?:MAIL FROM|From|Sender|Reply-To|Return-Path|Envelope-From)\s*:.*$",
                          re.I | re.M)


def _named(notice: str, compat: Message, excluded: set[str]) -> list[str]:
    """The addresses a plain-text notice names as failed: an ``RCPT TO:`` line's first; else
    every address outside sender lines — first without the bounce's own To and daemons, then
    with daemons (a bounce *to* postmaster@), then with the To (a bounce to oneself)."""
    rcpt = [_clean(m) for m in _RCPT_TO.findall(notice)]
    rcpt = [a for a in rcpt if a and a not in excluded]
    if rcpt:
        return rcpt[:1]
    text = _SENDER_LINE.sub(" ", notice)
    # Exim's "<b@y> may not follow a@x": a is the display name, not an address (RFC 5322 §3.4).
    text = _AS_DISPLAY_NAME.sub(" ", re.sub(r"may not follow \S+", " ", text))
    named = [a.lower().rstrip(".") for a in ADDRESS.findall(text)]
    named = [a for a in named if not _in_url(text, a)]
    own_to = {a.lower() for _, a in getaddresses([str(v) for v in compat.get_all("To", [])]) if a}
    own_from = parseaddr(str(compat.get("From", "")))[1].lower()
    for ok in (lambda a: _usable(a, excluded),
               lambda a: a not in excluded,
               lambda a: a != own_from and (a not in excluded or a in own_to)):
        found = [a for a in named if ok(a)]
        if found:
            return found
    return []


_NOT_RECIPIENT = re.compile(r"((https?://|www\.)\S*|(contact|assistance,? please|send (e-?)?mail to|"
                            r"write to|questions?)[^@\n]{0,40})$", re.I)
_MSGID_LOCAL = re.compile(r"^[0-9a-f][0-9a-f.\-]{15,}$", re.I)


def _in_url(text: str, address: str) -> bool:
    """Whether ``address`` appears as a contact anywhere (a URL, "please contact …") or looks like
    a Message-ID (a long hex local part), not as a recipient."""
    if _MSGID_LOCAL.match(address.partition("@")[0]):
        return True
    low = text.lower()
    hits = [m.start() for m in re.finditer(re.escape(address), low)]
    return any(_NOT_RECIPIENT.search(text[max(0, i - 200):i]) for i in hits)


def original_of(compat: Message) -> Message | None:
    """The returned message (its headers at least) a bounce or report encloses, or None."""
    return _parts(compat).original


def complaint(compat: Message, subject: str) -> tuple[tuple[str, ...], str, str] | None:
    """Recognise a complaint in the formats of the module docstring.

    :returns: ``(complainants, evidence, feedback_type)`` — every complainant (lower-case; may be
        empty when the report redacts them) — or None when this is no complaint.
    """
    ctype = compat.get_content_type()
    report = (compat.get_param("report-type") or "").lower() if ctype == "multipart/report" else ""
    parts = None
    if report == "feedback-report" or any(p.get_content_type() == "message/feedback-report"
                                          for p in compat.walk()):
        rcpts: list[str] = []
        ftype = "abuse"
        for part in compat.walk():
            if part.get_content_type() != "message/feedback-report":
                continue
            text = text_of(part) if not part.is_multipart() else "\n".join(
                f"{k}: {v}" for b in part.get_payload() if isinstance(b, Message) for k, v in b.items())
            rcpts += [_clean(m) for m in re.findall(r"^Original-Rcpt-To\s*:\s*(.+)$", text, re.I | re.M)]
            ft = re.search(r"^Feedback-Type\s*:\s*([\w-]+)", text, re.I | re.M)
            ftype = ft.group(1).lower() if ft else ftype
        rcpts = [a for a in rcpts if a]
        if not rcpts:
            parts = _parts(compat)
            if parts.original is not None:
                rcpts = [a.lower() for _, a in getaddresses([str(parts.original.get("To", ""))])
                         if a and "@" in a]
        return (tuple(dict.fromkeys(rcpts)), "Content-Type: multipart/report; "
                f"report-type=feedback-report (RFC 5965), Feedback-Type: {ftype}", ftype)
    sender = parseaddr(str(compat.get("From", "")))[1].lower()
    parts = _parts(compat)
    original = parts.original
    if original is not None and original.get("X-HmXmrOriginalRecipient") is not None:
        rcpts = [_clean(str(v)) for v in original.get_all("X-HmXmrOriginalRecipient", [])]
        return (tuple(a for a in dict.fromkeys(rcpts) if a),
                f"Microsoft JMRP (From: {sender}, X-HmXmrOriginalRecipient)", "abuse")
    if str(compat.get("X-Apple-Unsubscribe", "")).strip().lower() == "true":
        return ((sender,) if sender else (), "X-Apple-Unsubscribe: true (Apple Mail one-tap)",
                "opt-out")
    doc = _ses(parts.texts, "Complaint")
    if doc is not None:
        items = (doc.get("complaint") or {}).get("complainedRecipients") or []
        rcpts = [_clean(str(i.get("emailAddress", ""))) for i in items if isinstance(i, dict)]
        ftype = str((doc.get("complaint") or {}).get("complaintFeedbackType") or "abuse")
        return (tuple(a for a in dict.fromkeys(rcpts) if a),
                "Amazon SES complaint notification (notificationType: Complaint)", ftype)
    return None


def _ses(texts: list[str], kind: str) -> dict | None:  # type: ignore[type-arg]
    """The Amazon SES notification of ``kind`` (``Bounce``, ``Complaint``) a text part carries
    as JSON (SES → SNS → email; the SNS envelope unwrapped when present), or None."""
    for text in texts:
        if '"notificationType"' not in text and '\\"notificationType' not in text:
            continue
        start, end = text.find("{"), text.rfind("}")
        try:
            doc = json.loads(text[start:end + 1], strict=False) if 0 <= start < end else None
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("Message"), str):
            try:
                doc = json.loads(doc["Message"], strict=False)
            except ValueError:
                continue
        if isinstance(doc, dict) and doc.get("notificationType") == kind:
            return doc
    return None
