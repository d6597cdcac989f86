"""Composing a claimed row's message: its template context, its thread, rendering, building and
DKIM signing (:func:`prepare`; the sender, the preview and the test send all build with it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from outreach.claim import describe, message_class
from outreach.content import content_version
from outreach.feedback import feedback_id
from outreach.logutil import log
from outreach.message import (
    Envelope,
    ascii_domain,
    build_message,
    message_id_for,
    recipient_name,
    to_wire,
)
from outreach.render import render
from outreach.settings import Settings
from outreach.signing import DkimKey, SigningError, sign
from outreach.store import Conn, emails
from outreach.tokens import make_token

DkimKeyLoader = Callable[[str], bytes]
"""Given a mailbox's ``dkim_key_conn_id``, return its PEM private key (raise when it cannot)."""


def _context(row: dict[str, Any], unsubscribe_url: str) -> dict[str, Any]:
    return {
        "lead": {**{k: row[k] for k in ("first_name", "last_name", "company", "title", "email")},
                 "custom": row["custom"]},
        "sender": {"name": row["mailbox_name"], "address": row["mailbox_address"]},
        "campaign": {"key": row["campaign_key"], "name": row["campaign_name"]},
        "step": row["step_position"],
        "unsubscribe_url": unsubscribe_url,
    }


def transactional_context(context: dict[str, Any] | None, recipient: str, sender_name: str,
                          sender_address: str) -> dict[str, Any]:
    """Return the variables a transactional template is rendered with: what the application
    enqueued, plus ``recipient`` (``email``) and ``sender`` (``name``, ``address``)."""
    return {**(context or {}), "recipient": {"email": recipient},
            "sender": {"name": sender_name, "address": sender_address}}


@dataclass(frozen=True)
class Thread:
    """The thread a ``thread: true`` follow-up replies in (RFC 5322 §3.6.4).

    ``message_ids``: the lead's messages in it, oldest first, no angle brackets (the References; the
    last is In-Reply-To); ``subject``: step 1's Subject as sent, or ``None`` when the send log lacks
    it (then rendered again from step 1's ``template`` and ``subject_template``)."""

    message_ids: tuple[str, ...]
    subject: str | None
    template: str
    subject_template: str


_REPLY_PREFIX = re.compile(r"(?i)re:\s")


def reply_subject(subject: str) -> str:
    """Return the subject of a reply to ``subject``: ``"Re: "`` + it, unless it already starts
    with ``Re:`` (the prefix is not repeated)."""
    return subject if _REPLY_PREFIX.match(subject) else f"Re: {subject}"


def thread_of(conn: Conn, row: dict[str, Any]) -> Thread | None:
    """Return the thread a claimed row replies in, or ``None`` to send it as a new message.

    ``None`` when the step is not ``thread: true`` or step 1 never went out to this lead: never a
    "Re:" to a message that does not exist (Gmail's sender guidelines)."""
    if not row.get("step_thread"):
        return None
    members = emails.email_thread(conn, email_id=row["id"])
    if not members or members[0].position != 1:
        log.warning("%s: thread: true, but step 1 was never sent to this lead; sent as a new "
                    "message with its own subject", describe(row))
        return None
    first = members[0]
    return Thread(tuple(m.message_id.strip().strip("<>") for m in members), first.subject,
                  first.template, first.subject_template)


def row_content_version(row: dict[str, Any]) -> str:
    """Return the content version (:func:`outreach.content.content_version`) of a claimed
    row's message: its step's (or its A/B variant's) template, subject, thread flag, campaign
    and variant name, or its transactional template."""
    if message_class(row) == "transactional":
        return content_version(row["template"], None)
    return content_version(row["template"], row["subject"], thread=bool(row.get("step_thread")),
                           campaign_key=row["campaign_key"], campaign_name=row["campaign_name"],
                           variant=row.get("variant"))


def prepare(row: dict[str, Any], settings: Settings, now: dt.datetime,
            dkim_private_key: bytes | None = None, *, thread: Thread | None = None,
            ) -> tuple[str, bytes]:
    """Render, build and (with a DKIM selector) sign a claimed row's message; return ``(message_id, wire)``.

    Marketing rows get the one-click unsubscribe (RFC 8058); transactional rows their template's own
    subject and no List-Unsubscribe. Signing comes last, so ``h=`` covers what goes out (RFC 8058 §4).

    :param dkim_private_key: the PEM key of ``dkim_key_conn_id``; required with a ``dkim_selector``.
    :param thread: the thread to reply in (:func:`thread_of`): In-Reply-To, References, ``Re:``.
    :raises RenderError: the template failed for this lead.
    :raises MessageError: the message could not be built.
    :raises SigningError: the mailbox has a DKIM selector but the key is missing or unusable."""
    message_id, wire, _ = _build(row, settings, now, dkim_private_key, thread)
    return message_id, wire


def _build(row: dict[str, Any], settings: Settings, now: dt.datetime,
           dkim_private_key: bytes | None, thread: Thread | None) -> tuple[str, bytes, str]:
    """:func:`prepare`, also returning the Subject as built (kept in the send log)."""
    domain = ascii_domain(row["mailbox_address"].rpartition("@")[2])
    message_id = message_id_for(str(row["idempotency_key"]), row["mailbox_address"])
    if message_class(row) == "transactional":
        rendered = render(row["template"], None,
                          transactional_context(row["context"], row["email"], row["mailbox_name"],
                                                row["mailbox_address"]),
                          require_unsubscribe=False)
        envelope = Envelope(
            from_address=row["mailbox_address"], from_name=row["mailbox_name"],
            to_address=row["email"], to_name="", message_id=message_id, date=now,
            unsubscribe_url=None, unsubscribe_mailto=None,
            feedback_id=feedback_id(row["template"], row["mailbox_id"], settings.feedback_sender_id,
                                    "transactional"),
            step_tag=f"transactional/{row['template']}")
    else:
        token = make_token(settings.unsubscribe_secret, row["id"], now)  # stamped with the Date
        url = settings.unsubscribe_base + token
        context = _context(row, url)
        rendered = render(row["template"], row["subject"], context)
        if thread is not None:
            first = thread.subject or render(thread.template, thread.subject_template,
                                             {**context, "step": 1}).subject
            rendered = dataclasses.replace(rendered, subject=reply_subject(first))
        envelope = Envelope(
            from_address=row["mailbox_address"], from_name=row["mailbox_name"],
            to_address=row["email"], to_name=recipient_name(row["first_name"], row["last_name"]),
            message_id=message_id, date=now, unsubscribe_url=url,
            unsubscribe_mailto=f"mailto:unsubscribe@{domain}?subject=unsubscribe%20{token}",
            feedback_id=feedback_id(row["campaign_key"], row["mailbox_id"], settings.feedback_sender_id),
            step_tag=f"{row['campaign_key']}/{row['step_position']}",
            in_reply_to=thread.message_ids[-1] if thread else None,
            references=thread.message_ids if thread else ())
    msg = build_message(rendered, envelope)
    wire = to_wire(msg)
    if row.get("dkim_selector"):
        if not dkim_private_key:
            raise SigningError(f"mailbox {row['mailbox_id']} has dkim_selector "
                               f"{row['dkim_selector']!r} but no DKIM key was loaded")
        wire = sign(wire, DkimKey(row["dkim_selector"], domain, dkim_private_key))
    return message_id, wire, rendered.subject


class _KeyCache:
    """Load each DKIM key once per batch; remember a failure as a :class:`SigningError`."""

    def __init__(self, loader: DkimKeyLoader | None) -> None:
        self._loader = loader
        self._keys: dict[str, bytes | SigningError] = {}

    def for_row(self, row: dict[str, Any]) -> bytes | None:
        conn_id = row.get("dkim_key_conn_id")
        if not row.get("dkim_selector") or not conn_id:
            return None
        if conn_id not in self._keys:
            if self._loader is None:
                self._keys[conn_id] = SigningError(f"no DKIM key loader for {conn_id!r}")
            else:
                try:
                    self._keys[conn_id] = self._loader(conn_id)
                except Exception as exc:  # noqa: BLE001 - a missing connection, a bad secret
                    # The message names the connection and the error type, never the key.
                    self._keys[conn_id] = SigningError(
                        f"cannot load the DKIM key from connection {conn_id!r}: "
                        f"{type(exc).__name__}")
        key = self._keys[conn_id]
        if isinstance(key, SigningError):
            raise key
        return key
