"""Transactional mail with a durable delivery key: a signup welcome email goes out once.

The application calls :func:`enqueue` (or ``outreach.enqueue_transactional``) inside its own
transaction, an outbox; the key is UNIQUE, so a retry returns the existing row. The row then takes
the campaigns' send path, its Message-ID made from the key; suppression is asked for the
``transactional`` class; no warm-up, cap, window or List-Unsubscribe (Gmail exempts it).
:func:`send_due` is one send cycle, :func:`watch` runs it on LISTEN/NOTIFY. Templates
``<name>.subject.j2``, ``.txt.j2``, ``.html.j2``. docs/howto/transactional-mail.md."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from email_validator import EmailNotValidError
from psycopg.types.json import Jsonb

from outreach import db
from outreach.claim import worker_name
from outreach.compose import DkimKeyLoader, transactional_context
from outreach.handoff import SmtpConnector
from outreach.logutil import log, mask
from outreach.paths import templates_dir
from outreach.send import PlannedSummary, raise_if_unreachable, send_batch
from outreach.settings import Settings
from outreach.store import emails
from outreach.store import transactional as store

TEMPLATE_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,62}$")
TEMPLATE_PARTS = ("subject.j2", "txt.j2", "html.j2")
NOTIFY_CHANNEL = "outreach_transactional"


class TransactionalError(ValueError):
    """The request cannot be enqueued: a bad delivery key, recipient, template or context, or no
    mailbox to send it from. The message names the field."""


class DeliveryKeyConflict(TransactionalError):
    """The delivery key was already used for another message (another recipient or template)."""


@dataclass(frozen=True)
class Enqueued:
    """The one email row of a delivery key: ``email_id``; ``created`` (``False`` for a replay);
    ``status`` at the time of the call (``queued``, ``sending``, ``sent``, ``failed`` or
    ``suppressed``); ``message_key`` (the UUID the Message-ID is made of)."""

    email_id: int
    created: bool
    status: str
    message_key: uuid.UUID


def new_delivery_key() -> str:
    """Return a fresh delivery key (a random UUID as text), to be made once when the request
    arrives and kept with it (retries reuse it)."""
    return str(uuid.uuid4())


def _text_ok(value: str) -> bool:
    """PostgreSQL text holds neither NUL nor lone surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def validate_request(delivery_key: str, to: str, template: str,
                     context: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """Check a request before it reaches the database; return ``(normalised address, context)``.

    The template is rendered once with the context, so a missing variable is reported now.

    :raises TransactionalError: the delivery key is empty, over 200 characters or holds NUL; ``to``
        is not a valid address (no DNS lookup); ``template`` is not a lower-case name or a file is
        missing; ``context`` is not a JSON object, does not render, or the subject breaks
        :func:`outreach.message.header_text_problem`."""
    from outreach.addresses import normalize_address
    from outreach.message import header_text_problem
    from outreach.render import RenderError, render

    if not isinstance(delivery_key, str) or not 1 <= len(delivery_key) <= 200 or not _text_ok(delivery_key):
        raise TransactionalError("delivery_key: 1 to 200 characters, no NUL")
    try:
        address = normalize_address(to)
    except (EmailNotValidError, TypeError, AttributeError) as exc:
        raise TransactionalError(f"to: {exc}") from None
    if not isinstance(template, str) or not TEMPLATE_NAME.match(template):
        raise TransactionalError(f"template: {template!r} is not a template name "
                                 "(lower-case letters, digits, underscores)")
    missing = [f"{template}.{part}" for part in TEMPLATE_PARTS
               if not (templates_dir() / f"{template}.{part}").is_file()]
    if missing:
        raise TransactionalError(f"template: missing in {templates_dir()}: {', '.join(missing)}")
    if context is None:
        context = {}
    if not isinstance(context, Mapping):
        raise TransactionalError(f"context: must be a JSON object, got {type(context).__name__}")
    ctx = dict(context)
    try:
        text = json.dumps(ctx, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TransactionalError(f"context: not JSON-serialisable ({exc})") from None
    if not _text_ok(text) or "\\u0000" in text:
        raise TransactionalError("context: NUL characters and lone surrogates cannot be stored")
    try:
        rendered = render(template, None, transactional_context(ctx, address, "", ""),
                          require_unsubscribe=False)
    except RenderError as exc:
        raise TransactionalError(f"context: {exc}") from None
    if problem := header_text_problem(rendered.subject):  # the subject is a header
        raise TransactionalError(f"context: the subject would hold a {problem}")
    return address, ctx


def enqueue(conn: psycopg.Connection, delivery_key: str, to: str, template: str,
            context: Mapping[str, Any] | None = None, *, mailbox: str | None = None) -> Enqueued:
    """Enqueue one transactional email inside the caller's transaction (the caller commits; after an
    error here it must roll back; autocommit commits at once).

    A second call with the key returns the first row, ``created=False`` (a concurrent one waits for
    the first). A suppressed recipient gets a ``suppressed`` row.

    :param conn: the application's connection, inside its transaction (psycopg 3).
    :param delivery_key: made when the request arrived; the same for every retry.
    :param template: ``include/templates/<template>.{subject,txt,html}.j2``.
    :param context: the template's variables (a JSON object).
    :param mailbox: the sender's address; default the mailbox marked ``transactional: true``.
    :raises TransactionalError: see :func:`validate_request`; or no such mailbox.
    :raises DeliveryKeyConflict: the key was used for another recipient or template."""
    address, ctx = validate_request(delivery_key, to, template, context)
    try:
        # Inside the caller's transaction, no savepoint and no commit of our own: if this fails,
        # the caller's transaction fails with it (no user row without its email row). A cursor
        # of our own, so the caller's connection may use any row factory.
        row = store.transactional_enqueue(conn, delivery_key=delivery_key, recipient=address,
                                          template=template, context=Jsonb(ctx), mailbox=mailbox)
    except psycopg.errors.UniqueViolation as exc:
        # Raised by outreach.enqueue_transactional itself (no constraint name): the key was
        # used for another recipient or template, or its idempotency key is taken.
        raise DeliveryKeyConflict(exc.diag.message_primary or str(exc)) from None
    except (psycopg.errors.NoDataFound, psycopg.errors.InvalidParameterValue) as exc:
        raise TransactionalError(exc.diag.message_primary or str(exc)) from None
    result = Enqueued(row.email_id, row.created, row.status, row.message_key)
    log.info("transactional email %s (%s, %s) %s: status %s", result.email_id, mask(address),
             template, "enqueued" if result.created else "already enqueued (same delivery key)",
             result.status)
    return result


def send_due(url: str, connector: SmtpConnector, settings: Settings, *, limit: int | None = None,
             worker: str | None = None, now: dt.datetime | None = None,
             dkim_keys: DkimKeyLoader | None = None) -> PlannedSummary:
    """One short send cycle: claim and send every mailbox's due transactional rows, at most ``limit``
    each (default ``settings.batch_size``), one SMTP session per mailbox. Safe to repeat.

    :raises outreach.db.OutreachDBError: the database is unreachable.
    :raises outreach.send.BatchAborted: see :func:`outreach.send.send_batch`.
    :raises outreach.send.MailboxUnreachable: after every mailbox, if one could not send at all."""
    worker = worker or worker_name("transactional")
    with db.connect(url, autocommit=True) as conn:
        due = emails.email_plan_transactional(conn, now=now)
    summary = PlannedSummary(label="transactional")
    for m in due:
        if m.status != "active":
            log.warning("mailbox %s (%s) is paused: %s transactional email(s) wait for it",
                        m.mailbox_id, mask(m.address), m.due)
            continue
        summary.batches.append(send_batch(url, m.mailbox_id, limit or settings.batch_size,
                                          connector, settings, worker=worker, now=now,
                                          dkim_keys=dkim_keys, message_class="transactional"))
    log.info(summary.line())
    raise_if_unreachable(summary.batches)
    return summary


def watch(url: str, connector: SmtpConnector, settings: Settings, *, poll_seconds: float = 30.0,
          stop: threading.Event | None = None, dkim_keys: DkimKeyLoader | None = None) -> None:
    """Run :func:`send_due` whenever a transactional email is enqueued (``LISTEN
    outreach_transactional``; :func:`enqueue` notifies at commit) and at least every
    ``poll_seconds`` seconds, until ``stop`` is set (or forever).

    A cycle that fails (the database or the SMTP server away) is logged and the loop goes on;
    nothing claimed is lost (see :func:`outreach.send.send_batch`).
    """
    stop = stop or threading.Event()
    worker = worker_name("transactional-worker")
    while not stop.is_set():
        try:
            with db.connect(url, autocommit=True) as listener:
                listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                while not stop.is_set():
                    send_due(url, connector, settings, worker=worker, dkim_keys=dkim_keys)
                    # Wait for a NOTIFY (or the poll interval); several at once make one cycle.
                    for _ in listener.notifies(timeout=poll_seconds, stop_after=1):
                        pass
        except Exception as exc:  # noqa: BLE001 - keep the worker alive; log and retry
            log.error("transactional worker: %s: %s; retrying in 5 s", type(exc).__name__, exc)
            stop.wait(5)
