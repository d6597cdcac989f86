"""Message building: a pure function from rendered parts and headers to an RFC 5322 message.

Headers are set through :mod:`email.headerregistry` with the SMTP policy, so CR/LF in a name or
subject can never inject a header, non-ASCII display names are RFC 2047-encoded and
internationalised domains are IDNA-encoded (UTS #46, as :mod:`idna` does; RFC 5890). An address
whose local part is not ASCII cannot be written in an RFC 5322 header at all: such a message is
built with the SMTPUTF8 policy (RFC 6532 headers in UTF-8) and needs a server that offers SMTPUTF8
(RFC 6531); the transport asks for it.
"""

from __future__ import annotations

import datetime as dt
import email.policy
import email.utils
import re
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage

import idna

from outreach.render import Rendered


_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


class MessageError(ValueError):
    """The message cannot be built (for example an address that cannot be put in a header)."""


@dataclass(frozen=True)
class Envelope:
    """Who and what: ``from_address``/``from_name``, ``to_address``/``to_name``; ``message_id``
    without angle brackets; ``date`` (aware, UTC); ``unsubscribe_url`` (https) and
    ``unsubscribe_mailto`` (both ``None`` for transactional mail: no List-Unsubscribe headers);
    ``feedback_id`` (``a:b:c:SenderId``); ``step_tag`` (campaign/step, or transactional/template)."""

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


def build_message(rendered: Rendered, env: Envelope) -> EmailMessage:
    """Build the multipart/alternative message (text, then HTML).

    Marketing mail carries List-Unsubscribe (the https URL first, then mailto) and
    ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` (RFC 8058 §3.1–3.2); transactional mail
    neither (Gmail's bulk-sender rules exempt it). Both carry Feedback-ID (Gmail feedback loop)
    and a Message-ID derived from the row's idempotency key.

    :raises MessageError: an address cannot be represented in a header.
    """
    if env.date.tzinfo is None:
        raise MessageError("the Date must be timezone-aware (UTC)")
    utf8 = not (env.from_address.rpartition("@")[0] + env.to_address.rpartition("@")[0]).isascii()
    msg = EmailMessage(policy=email.policy.SMTPUTF8 if utf8 else email.policy.SMTP)
    try:
        msg["From"] = _address(env.from_address, env.from_name)
        msg["To"] = _address(env.to_address, env.to_name)
        msg["Subject"] = rendered.subject
    except (ValueError, TypeError) as exc:
        raise MessageError(str(exc)) from None
    msg["Date"] = email.utils.format_datetime(env.date.astimezone(dt.timezone.utc))
    msg["Message-ID"] = f"<{env.message_id}>"
    if env.unsubscribe_url:  # marketing; transactional mail carries neither header
        msg["List-Unsubscribe"] = f"<{env.unsubscribe_url}>, <{env.unsubscribe_mailto}>"
        msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg["Feedback-ID"] = env.feedback_id
    msg["X-Outreach-Step"] = env.step_tag
    msg.set_content(rendered.text)
    msg.add_alternative(rendered.html, subtype="html")
    return msg


# Header lines are folded only past RFC 5322's hard limit of 998 characters: Python's folder turns
# a single token longer than 78 characters (a long List-Unsubscribe URL) into RFC 2047
# encoded-words, which breaks structured headers. Bodies are already encoded by set_content.
WIRE_POLICY = email.policy.SMTP.clone(max_line_length=998)
WIRE_POLICY_UTF8 = email.policy.SMTPUTF8.clone(max_line_length=998)


def to_wire(msg: EmailMessage) -> bytes:
    """Serialise with CRLF line endings, as SMTP expects (before dot-stuffing); a message built
    for SMTPUTF8 keeps its UTF-8 headers (RFC 6532)."""
    return msg.as_bytes(policy=WIRE_POLICY_UTF8 if msg.policy.utf8 else WIRE_POLICY)
