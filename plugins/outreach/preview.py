"""Preview a campaign step: each message exactly as the sender would hand it over.

Built by :func:`outreach.compose.prepare` from the row the claim would return, so byte-equal to
what the SMTP server receives apart from ``Date`` and ``DKIM-Signature``; a step not queued yet
uses placeholders, and a lead the step would skip is named with the reason.
docs/howto/launch-a-campaign.md."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import re
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from outreach import db
from outreach.compose import prepare, row_content_version, thread_of
from outreach.settings import Settings
from outreach.store import Conn
from outreach.store import campaigns as campaigns_store

PLACEHOLDER_KEY = uuid.UUID(int=0)
"""The idempotency key a preview shows for a step not queued yet (the real one is drawn by
``email_queue_due``)."""


@dataclass(frozen=True)
class PreviewItem:
    """One lead's preview: ``address`` (the lead's), ``skip`` (why the step would not go to it;
    ``None``: it would), ``message_id`` and ``wire`` (the message as handed over, CRLF line ends;
    ``None`` when skipped), ``notes`` (placeholders used, DKIM, threading)."""

    address: str
    skip: str | None
    message_id: str | None
    wire: bytes | None
    notes: tuple[str, ...] = ()


class PreviewError(LookupError):
    """No such campaign or step, or no such lead in the campaign."""


def skip_reason(row: dict[str, Any]) -> str | None:
    """Return why the step would skip the lead of a ``campaign_preview_rows`` row, or ``None``."""
    if row["enrollment_status"] != "active":
        return f"enrolment {row['enrollment_status']}"
    if row["suppressed"]:
        return "suppressed (outreach.is_suppressed)"
    if row["missing"]:
        return f"missing required field(s): {', '.join(row['missing'])}"
    return None


def build_row(conn: Conn, row: dict[str, Any], settings: Settings, now: dt.datetime,
              dkim_private_key: bytes | None = None) -> tuple[str, bytes, list[str]]:
    """Build one row's message with :func:`outreach.compose.prepare`; return ``(message_id, wire,
    notes)``. Placeholders stand in for a step not queued yet; the message is signed only when
    ``dkim_private_key`` is given (else ``dkim_selector`` is dropped for the build).

    :raises RenderError, MessageError, SigningError: as :func:`outreach.compose.prepare`.
    """
    notes: list[str] = []
    row = dict(row)
    thread = None
    if row["id"] is None:
        row["id"], row["idempotency_key"] = 0, PLACEHOLDER_KEY
        notes.append("not queued yet: Message-ID and unsubscribe token are placeholders "
                     "(fixed when queue-due queues the step)")
        if row["step_thread"]:
            notes.append("thread: true: sent as a reply in step 1's thread once step 1 went out")
    else:
        thread = thread_of(conn, row)
    if row["dkim_selector"] and dkim_private_key is None:
        notes.append(f"DKIM-Signature (s={row['dkim_selector']}) is added at the handoff")
        row["dkim_selector"] = None
    message_id, wire = prepare(row, settings, now, dkim_private_key, thread=thread)
    if row.get("variant") is not None:
        notes.append(f"A/B variant {row['variant']}" + (
            "" if row["id"] else " (the one queue-due will choose: outreach.step_variant_for)"))
    notes.append(f"step content version {row_content_version(row)}")
    return message_id, wire, notes


def preview(url: str, key: str, settings: Settings, *, address: str | None = None,
            sample: int = 3, step: int = 1, now: dt.datetime | None = None) -> list[PreviewItem]:
    """Preview step ``step`` of campaign ``key`` for one lead (``address``) or the first
    ``sample`` enrolled leads; nothing is written.

    :param now: the Date header (UTC; default the current time).
    :raises PreviewError: no such campaign or step, or ``address`` is not enrolled in it.
    :raises RenderError, MessageError: a template or header failed for a lead (named).
    """
    now = now or dt.datetime.now(dt.UTC)
    with db.connect(url, autocommit=True) as conn:
        if campaigns_store.campaign_find(conn, key=key) is None:
            raise PreviewError(f"no campaign {key!r} (the key of a synced campaign file)")
        rows = [asdict(r) for r in campaigns_store.campaign_preview_rows(
            conn, key=key, step=step, address=address, limit=1 if address else sample)]
        if not rows:
            raise PreviewError(f"campaign {key}: no step {step}, or no enrolled lead"
                               + (f" {address!r}" if address else ""))
        out = []
        for row in rows:
            why = skip_reason(row)
            if why is not None:
                out.append(PreviewItem(row["email"], why, None, None))
                continue
            message_id, wire, notes = build_row(conn, row, settings, now)
            out.append(PreviewItem(row["email"], None, message_id, wire, tuple(notes)))
        return out


def _item_head(item: PreviewItem, step: int) -> str:
    """The ``===`` line of an item and its ``--- note:`` lines (a skipped lead: one line)."""
    to = printable(item.address)  # validated at import; a row written by hand may hold anything
    if item.skip is not None:
        return f"=== step {step} to {to}: SKIPPED: {printable(item.skip)}\n"
    head = f"=== step {step} to {to}: Message-ID <{item.message_id}>\n"
    return head + "".join(f"--- note: {printable(note)}\n" for note in item.notes)


def item_text(item: PreviewItem, step: int) -> bytes:
    """Return what ``outreach campaign preview --raw`` prints for one item (the campaign page shows
    these same bytes): a ``===`` line, one ``--- note:`` line per note, the message as handed
    over (the wire form, LF line ends).

    :param step: the step previewed (1-based), named in the ``===`` line."""
    if item.skip is not None:
        return _item_head(item, step).encode()
    assert item.wire is not None
    return _item_head(item, step).encode() + item.wire.replace(b"\r\n", b"\n") + b"\n"


MIME_PLUMBING = frozenset({"mime-version", "content-type", "content-transfer-encoding"})
"""Header fields the readable preview leaves out: how the parts are packed, not what is said
(``--raw`` shows them)."""


def item_readable(item: PreviewItem, step: int) -> str:
    """Return what ``outreach campaign preview`` prints for one item by default: the lines of
    :func:`item_text` before the message, each header but :data:`MIME_PLUMBING` as a mail
    reader shows it (:func:`display_header`), the decoded text part, and the HTML part's size (``--raw`` prints
    it; the campaign page draws it). Lead data is shown, never obeyed: a control character in
    it (a terminal escape, a CR) is printed as a Python escape (:func:`printable`).

    :param step: the step previewed (1-based), named in the ``===`` line."""
    if item.skip is not None:
        return _item_head(item, step)
    assert item.wire is not None
    parts = message_parts(item.wire)
    out = [_item_head(item, step)]
    out += [f"{name}: {display_header(name, value)}\n" for name, value in parts.headers
            if name.lower() not in MIME_PLUMBING]
    out.append("\n--- text part\n" + printable(parts.text or "", keep="\n\t").rstrip("\n") + "\n")
    if parts.html is not None:
        out.append(f"--- HTML part: {len(parts.html)} characters (--raw prints it; the campaign "
                   "page draws it)\n")
    return "".join(out) + "\n"


def printable(text: str, keep: str = "") -> str:
    r"""Return ``text`` with every non-printable character (except those in ``keep``) written as
    a Python escape (``\x1b``, ``\u2028``, ``\U000e0041``), so shown text never acts on a
    terminal or reads as a second line."""
    return "".join(ch if ch.isprintable() or ch in keep else
                   f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else
                   f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}"
                   for ch in text)


@dataclass(frozen=True)
class MessageParts:
    """A built message taken apart for display: ``headers`` (name, unfolded value) in wire
    order, ``text`` and ``html`` (the decoded parts with LF line ends, as the CLI prints the
    message — and as a browser reads any page; ``None`` when the message has none)."""

    headers: tuple[tuple[str, str], ...]
    text: str | None
    html: str | None


def display_header(name: str, value: str) -> str:
    """Return a header value as a mail reader shows it (RFC 2047 decoded, display names unquoted).

    A non-printable character (a decoded CR or LF) is shown as a Python escape, so a value never
    reads as a second field; an unparsable value is returned as written. Text, not markup.

    :param name: the field name (it picks the parser).
    :param value: the unfolded value, as :func:`message_parts` gives it."""
    try:
        shown = str(email.policy.default.header_factory(name, value))
    except Exception:  # noqa: BLE001 - a display aid: the raw value is still the truth
        shown = value
    return printable(shown)


def message_parts(wire: bytes) -> MessageParts:
    """Take a built message apart: its header fields as written (encoded words kept) and the decoded
    text and HTML parts."""
    head = wire.partition(b"\r\n\r\n")[0].decode("utf-8", "replace")
    fields = re.split(r"\r\n(?![ \t])", head)
    headers = tuple((name, re.sub(r"\r\n[ \t]", " ", value).strip())
                    for name, _, value in (f.partition(":") for f in fields if f))
    msg = email.message_from_bytes(wire, policy=email.policy.default)
    text = msg.get_body(("plain",))
    html = msg.get_body(("html",))
    return MessageParts(
        headers, text.get_content().replace("\r\n", "\n") if text is not None else None,
        html.get_content().replace("\r\n", "\n") if html is not None else None)
