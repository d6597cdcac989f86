"""Message building: a pure function from rendered parts and headers to an RFC 5322 message.

Non-ASCII display names are RFC 2047-encoded, domains IDNA-encoded (UTS #46, RFC 5890); a
non-ASCII local part needs the SMTPUTF8 policy (RFC 6531/6532). Header safety is three layers
(:func:`header_text_problem`, :func:`build_message`, :func:`to_wire`); a message failing one
raises :class:`MessageError` and is never handed over. Why: docs/explanation/lead-data.md."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import email.errors
import email.parser
import email.policy
import email.utils
import re
from collections.abc import Iterable
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage, Message
from typing import Any, cast

import idna

from outreach.render import Rendered

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


class MessageError(ValueError):
    """The message cannot be built (for example an address that cannot be put in a header)."""


# An RFC 2047 §2 encoded word, matched more loosely than the RFC allows (any charset text, the
# encoded text up to the first "?=", anywhere in the text): a superset of what any version of
# the email package decodes, so nothing it would decode escapes the check.
_ENCODED_WORD = re.compile(r"=\?([^?]*)\?([bBqQ])\?(.*?)\?=", re.DOTALL)
_CONTROL_BYTE = re.compile(rb"[\x00-\x1f\x7f]")


# Unicode categories Cc (U+0000–U+001F, U+007F–U+009F), Zl (U+2028) and Zp (U+2029), exactly.
_CONTROL_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _unsafe_char(text: str) -> str | None:
    m = _CONTROL_CHAR.search(text)
    return m.group() if m else None


def _decoded_word(charset: str, encoding: str, text: str) -> tuple[bytes, str]:
    """Decode one encoded word as leniently as the email package does (missing base64 padding,
    stray characters dropped); the text in its charset, or Latin-1 when the charset is unknown."""
    if encoding in "bB":
        raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=False)
    else:
        raw = binascii.a2b_qp(text.encode("ascii", "replace"), header=True)
    try:
        return raw, raw.decode(charset.partition("*")[0] or "ascii", "replace")
    except LookupError:
        return raw, raw.decode("latin-1")


def header_text_problem(text: str) -> str | None:
    """Return why ``text`` may not appear in a header, or ``None`` when it may: **the** rule.

    No control character (Unicode Cc, U+2028, U+2029) in the text nor in any RFC 2047 encoded word in
    it once decoded (CVE-2024-6923), and no byte 0x00–0x1F or 0x7F in the decoded bytes (RFC 5322
    §2.2, RFC 6532 §3.2). Callers fold white space runs to one space first. Why:
    docs/explanation/lead-data.md.

    :param text: a header value as the caller means it (a subject, a display name).
    :returns: a one-line reason naming the character, or ``None``."""
    bad = _unsafe_char(text)
    if bad is not None:
        return f"control character U+{ord(bad):04X}"
    for m in _ENCODED_WORD.finditer(text) if "=?" in text else ():
        raw, decoded = _decoded_word(*m.groups())
        bad = _unsafe_char(decoded)
        if bad is None and (byte := _CONTROL_BYTE.search(raw)):
            bad = chr(byte.group()[0])
        if bad is not None:
            word = m.group() if len(m.group()) <= 40 else m.group()[:39] + "…"
            return f"control character U+{ord(bad):04X} after decoding the encoded word {word!r}"
    return None


@dataclass(frozen=True)
class Envelope:
    """Who and what: ``from_address``/``from_name``, ``to_address``/``to_name``; ``message_id``
    without angle brackets; ``date`` (aware, UTC); ``unsubscribe_url`` (https) and
    ``unsubscribe_mailto`` (both ``None`` for transactional mail: no List-Unsubscribe headers);
    ``feedback_id`` (``a:b:c:SenderId``); ``step_tag`` (campaign/step, or transactional/template);
    for a reply in a thread, ``in_reply_to`` (the parent's Message-ID) and ``references`` (every
    earlier Message-ID of the thread, oldest first), all without angle brackets."""

    from_address: str
    from_name: str
    to_address: str
    to_name: str
    message_id: str
    date: dt.datetime
    unsubscribe_url: str | None
    unsubscribe_mailto: str | None
    feedback_id: str
    step_tag: str
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()


def ascii_domain(domain: str) -> str:
    """Return ``domain`` IDNA-encoded (``bücher.example`` → ``xn--bcher-kva.example``).

    :raises MessageError: the domain is not a valid (internationalised) host name: only
        letters, digits and hyphens in dot-separated labels survive, so no CR/LF or other
        character can reach a header or an SMTP command.
    """
    try:
        out = domain.lower() if domain.isascii() else idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise MessageError(f"invalid domain {domain!r}: {exc}") from None
    if len(out) > 253 or not all(_LABEL.fullmatch(label) for label in out.split(".")):
        raise MessageError(f"invalid domain {domain!r}")
    return out


def envelope_address(address: str) -> str:
    """Return ``address`` as it goes into MAIL FROM / RCPT TO: the domain IDNA-encoded, so only a
    non-ASCII local part needs SMTPUTF8 (RFC 6531).

    :raises MessageError: the domain is not a valid internationalised domain name.
    """
    local, _, domain = address.rpartition("@")
    return f"{local}@{ascii_domain(domain)}"


def message_id_for(idempotency_key: str, sender_address: str) -> str:
    """Return the Message-ID (without brackets) for an email row: ``<key>@<sender domain>``.

    Fixed per row: every attempt of the row carries the same Message-ID (RFC 5322 §3.6.4).
    """
    return f"{idempotency_key}@{ascii_domain(sender_address.rpartition('@')[2])}"


# RFC 5322 §3.6.4 msg-id without its angle brackets: dot-atom-text "@" (dot-atom-text or a
# no-fold-literal). Nothing else (no space, no bracket, no control character) can reach the
# In-Reply-To and References headers.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_MSG_ID = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*@(?:{_ATEXT}(?:\.{_ATEXT})*|\[[!-Z^-~]*\])")


def _msg_id(value: str, header: str) -> str:
    if not _MSG_ID.fullmatch(value or ""):
        raise MessageError(f"header {header}: not a Message-ID (RFC 5322 msg-id): {value[:80]!r}")
    return f"<{value}>"


def _address(addr: str, name: str) -> Address:
    local, _, domain = addr.rpartition("@")
    # Addresses are validated at import; this guards rows that reached the table another way.
    if not local or any(c.isspace() or c in '"\\<>,;' or not c.isprintable() for c in local):
        raise MessageError(f"cannot use address in a header: bad local part {local!r}")
    try:
        return Address(display_name=" ".join(name.split()), username=local,
                       domain=ascii_domain(domain))
    except (ValueError, IndexError) as exc:
        raise MessageError(f"cannot use address in a header: {exc}") from None


def recipient_name(first_name: str, last_name: str) -> str:
    """Return the To display name of a lead: ``"First Last"``, stripped (either may be blank)."""
    return f"{first_name} {last_name}".strip()


def _set_lead_headers(msg: EmailMessage, to_address: str, to_name: str, subject: str) -> None:
    """Set the headers lead data reaches, To and Subject, as every message sets them."""
    try:
        msg["To"] = _address(to_address, to_name)
        msg["Subject"] = subject
    except (ValueError, TypeError) as exc:
        raise MessageError(str(exc)) from None


def _first_header_problem(msg: EmailMessage) -> tuple[str, str] | None:
    """``(header name, reason)`` of the first header of ``msg`` that breaks
    :func:`header_text_problem` as the email package holds it (encoded words decoded), or
    ``None``."""
    for name, value in msg.items():
        problem = header_text_problem(str(value))
        if problem:
            return name, problem
    return None


def lead_header_problem(to_address: str, to_name: str, subjects: Iterable[str]) -> str | None:
    """Return why a message to this lead would be refused for its headers, or ``None``.

    **The** check :func:`build_message` makes of the headers lead data reaches (To, Subject), made the
    same way, so the import (:mod:`outreach.leads`) refuses such a row with its line and field.
    Fields that pass one by one may fail together: docs/explanation/lead-data.md.

    :param to_address: the recipient as stored (normalised).
    :param to_name: :func:`recipient_name` of the lead.
    :param subjects: the Subject of each message the lead may get, rendered and folded.
    :returns: ``"header To: control character U+000D after decoding …"``-style text, or ``None``."""
    utf8 = not to_address.rpartition("@")[0].isascii()  # as build_message chooses its policy
    for subject in subjects:
        msg = EmailMessage(policy=email.policy.SMTPUTF8 if utf8 else email.policy.SMTP)
        try:
            _set_lead_headers(msg, to_address, to_name, subject)
        except MessageError as exc:
            return f"header To or Subject: {exc}"
        found = _first_header_problem(msg)
        if found:
            return f"header {found[0]}: {found[1]}"
    return None


def build_message(rendered: Rendered, env: Envelope) -> EmailMessage:
    """Build the multipart/alternative message (text, then HTML).

    Marketing mail carries List-Unsubscribe (https first, then mailto) and List-Unsubscribe-Post
    (RFC 8058 §3.1–3.2); transactional mail neither (Gmail's bulk-sender rules exempt it). Both carry
    Feedback-ID and the row's Message-ID; a threaded reply In-Reply-To and References (RFC 5322
    msg-id form). Every header must pass :func:`header_text_problem`.

    :raises MessageError: an address cannot be put in a header, or a header breaks the rule."""
    if env.date.tzinfo is None:
        raise MessageError("the Date must be timezone-aware (UTC)")
    utf8 = not (env.from_address.rpartition("@")[0] + env.to_address.rpartition("@")[0]).isascii()
    msg = EmailMessage(policy=email.policy.SMTPUTF8 if utf8 else email.policy.SMTP)
    try:
        msg["From"] = _address(env.from_address, env.from_name)
    except (ValueError, TypeError) as exc:
        raise MessageError(str(exc)) from None
    _set_lead_headers(msg, env.to_address, env.to_name, rendered.subject)
    msg["Date"] = email.utils.format_datetime(env.date.astimezone(dt.UTC))
    msg["Message-ID"] = f"<{env.message_id}>"
    if env.unsubscribe_url:  # marketing; transactional mail carries neither header
        msg["List-Unsubscribe"] = f"<{env.unsubscribe_url}>, <{env.unsubscribe_mailto}>"
        msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    if env.references:  # a reply in a thread (RFC 5322 §3.6.4)
        msg["In-Reply-To"] = _msg_id(env.in_reply_to or env.references[-1], "In-Reply-To")
        msg["References"] = " ".join(_msg_id(m, "References") for m in env.references)
    msg["Feedback-ID"] = env.feedback_id
    msg["X-Outreach-Step"] = env.step_tag
    found = _first_header_problem(msg)  # the same check the import makes: lead_header_problem
    if found:
        raise MessageError(f"header {found[0]}: {found[1]} (lead data may not hold control characters)")
    msg.set_content(rendered.text)
    msg.add_alternative(rendered.html, subtype="html")
    msg.set_boundary(_boundary(env.message_id, rendered.text + rendered.html))
    return msg


def _boundary(message_id: str, body: str) -> str:
    """Return the MIME boundary, derived from the Message-ID so the same row builds the same bytes.

    ``=_`` cannot occur in a quoted-printable or base64 part; a text part holding it anyway (RFC 2046
    §5.1.1) gets a counter appended until it does not."""
    import hashlib

    base = "=_outreach_" + hashlib.sha256(message_id.encode()).hexdigest()[:32]
    boundary, n = base, 0
    while boundary in body:
        n += 1
        boundary = f"{base}_{n}"
    return boundary


# Header lines are folded only past RFC 5322's hard limit of 998 characters: Python's folder turns
# a single token longer than 78 characters (a long List-Unsubscribe URL) into RFC 2047
# encoded-words, which breaks structured headers. Bodies are already encoded by set_content.
WIRE_POLICY = email.policy.SMTP.clone(max_line_length=998)
WIRE_POLICY_UTF8 = email.policy.SMTPUTF8.clone(max_line_length=998)


def _header_list(msg: Message) -> list[tuple[str, str]]:
    return [(name.lower(), " ".join(str(value).split())) for name, value in msg.items()]


def _written_headers(wire: bytes, policy: email.policy.EmailPolicy[Any]) -> list[tuple[str, str]]:
    """The header fields of ``wire`` as a reader's parser sees them (:func:`_header_list`'s form).

    Only values holding an encoded word or non-ASCII are decoded by ``policy`` (the full parse made
    building 1.7 times slower: docs/explanation/lead-data.md)."""
    parsed = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(wire, headersonly=True)
    out = []
    for name, raw in parsed.raw_items():
        value = raw if raw.isascii() and "=?" not in raw else policy.header_fetch_parse(name, raw)
        out.append((name.lower(), " ".join(str(value).split())))
    return out


def to_wire(msg: EmailMessage) -> bytes:
    """Serialise with CRLF line endings (before dot-stuffing); SMTPUTF8 messages keep UTF-8 headers.

    The bytes are parsed back and their header fields (names, order, values) must equal the
    message's own, so no value became a header line of its own.

    :raises MessageError: the headers differ (the first difference is named), or the email package
        refused to write a header."""
    # An EmailMessage carries an EmailPolicy (typeshed types it as the base Policy).
    policy = WIRE_POLICY_UTF8 if cast("email.policy.EmailPolicy[Any]", msg.policy).utf8 else WIRE_POLICY
    try:
        wire = msg.as_bytes(policy=policy)
    except email.errors.MessageError as exc:  # HeaderWriteError on interpreters with the fix
        raise MessageError(f"cannot write the headers: {exc}") from None
    meant = _header_list(msg)
    sent = _written_headers(wire, policy)
    if sent != meant:
        i = next((i for i, (m, w) in enumerate(zip(meant, sent, strict=False)) if m != w), min(len(meant), len(sent)))
        set_, written = (", ".join(n for n, _ in hs[i:i + 3]) or "nothing" for hs in (meant, sent))
        raise MessageError(  # names only: a value may hold an address (logs never show one)
            f"the written message does not have the headers that were set: from header {i + 1} "
            f"on, {set_} were set and {written} written (a line break in a value?)")
    return wire
