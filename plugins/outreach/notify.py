"""Reply notifications (issue 26, item 5): each new ``replied`` event becomes a notice, several of
one batch in one message, delivered through a notifier.

The events are read with a cursor of their own in ``outreach.export_cursors``, as the warehouse
export reads them (:func:`outreach.export.export`): at least once, never skipped. The reply's
first lines are read again from the mailbox (``BODY.PEEK``), never stored. No Airflow here
(:func:`outreach.airflow.tasks_inbox.notify_replies_task`). Why: docs/howto/notifications.md."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from outreach import db
from outreach.export import export
from outreach.imap import ImapAccount, ImapError, ImapSession
from outreach.inbound import leading_lines, parse
from outreach.logutil import log, mailbox_name, mask
from outreach.settings import NotifySettings
from outreach.store import exports as exports_store
from outreach.store import inbound as inbound_store
from outreach.store.exports import ExportEvent
from outreach.store.inbound import ReplyNotice

BATCH = 500
"""Events read per batch (a batch's replies are one message)."""

Deliver = Callable[[str, str], bool]
"""``deliver(subject, body)``: hand one notice to the notifier (plain-text body; the notifier
escapes it). :func:`outreach.airflow.alerts.deliver_alert`."""

AccountLoader = Callable[[str], ImapAccount]
"""Turns an Airflow IMAP connection id into an account (:func:`outreach.airflow.connections.imap_account`)."""


@dataclass(frozen=True)
class NotifyResult:
    """What one :func:`notify_replies` did: replies notified and messages delivered."""

    replies: int
    messages: int


def _clean(text: str, cap: int) -> str:
    """One line of lead text for a notice: control and format characters out, whitespace
    collapsed, at most ``cap`` characters (an ellipsis when cut)."""
    text = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in text)
    text = " ".join(text.split())
    return text if len(text) <= cap else text[:max(cap - 1, 0)] + "…"


def reply_lines(accounts: AccountLoader, notices: Sequence[ReplyNotice], *, lines: int,
                chars: int) -> dict[int, list[str] | str]:
    """Read the first ``lines`` lines of each reply (at most ``chars`` characters in all) from
    its mailbox, one IMAP session per account; return ``{event id: lines}``, or a one-line
    reason instead of the lines when the message cannot be read (gone, UIDVALIDITY changed,
    the mailbox refused). Never raises for a mailbox: a notice goes out without its lines."""
    out: dict[int, list[str] | str] = {}
    if lines <= 0 or chars <= 0:
        return out
    by_account: dict[tuple[str, str], list[ReplyNotice]] = {}
    for n in notices:
        if n.account is None or n.folder is None or n.uid is None:
            out[n.event_id] = "(the message's record was erased)"
        else:
            by_account.setdefault((n.account, n.folder), []).append(n)
    for (account, folder), group in by_account.items():
        try:
            with ImapSession(accounts(account)) as session:
                uidvalidity = session.select(folder)
                wanted = {n.uid: n for n in group if n.uidvalidity == uidvalidity}
                for n in group:
                    if n.uid not in wanted:
                        out[n.event_id] = "(the mailbox was renumbered: message not found)"
                for fetched in session.fetch(sorted(wanted)):
                    _, msg = parse(fetched.raw)
                    left, kept = chars, []
                    for line in leading_lines(msg, lines):
                        if left <= 0:
                            break
                        kept.append(_clean(line, left))
                        left -= len(kept[-1])
                    out[wanted.pop(fetched.uid).event_id] = kept
                for n in wanted.values():
                    out[n.event_id] = "(no longer in the mailbox)"
        except Exception as exc:  # noqa: BLE001 - the notice goes out anyway
            reason = exc.stage if isinstance(exc, ImapError) else type(exc).__name__
            log.warning("reply notice: account %s could not be read (%s): notices without "
                        "their lines", account, reason)
            for n in group:
                out.setdefault(n.event_id, f"(the mailbox could not be read: {reason})")
    return out


def compose(notices: Sequence[ReplyNotice], lines: dict[int, list[str] | str], *,
            masked: bool) -> tuple[str, str]:
    """Return one message's ``(subject, plain-text body)`` for the replies ``notices``.

    The subject names counts and campaign keys only (no lead data in a header); the body has
    one paragraph per reply: the lead (masked when ``masked``), campaign, step, mailbox,
    subject and the quoted lines, each line cleaned (:func:`_clean`).
    """
    campaigns = sorted({n.campaign for n in notices if n.campaign})
    subject = (f"outreach: {len(notices)} new repl{'y' if len(notices) == 1 else 'ies'}"
               + (f" ({', '.join(campaigns)})" if campaigns else ""))
    parts = []
    for n in notices:
        lead = "(erased lead)" if n.lead is None else (mask(n.lead) if masked else n.lead)
        head = (f"Reply from {_clean(lead, 200)} — campaign {n.campaign or '(erased)'}, "
                f"step {n.step if n.step is not None else '?'}, mailbox "
                f"{mailbox_name(n.mailbox_label, n.mailbox_display_name, n.mailbox_address) or '?'}")
        text = [head, f"Subject: {_clean(n.subject or '', 200)}"]
        got = lines.get(n.event_id)
        if isinstance(got, str):
            text.append(got)
        elif got:
            text += [f"> {line}" for line in got]
        text.append(f"(event {n.event_id})")
        parts.append("\n".join(text))
    return subject, "\n\n".join(parts) + "\n"


class _Notices:
    """The export target that turns a batch's reply events into one delivered message."""

    def __init__(self, url: str, deliver: Deliver, accounts: AccountLoader,
                 config: NotifySettings) -> None:
        self.name = config.notify_target
        self._url, self._deliver, self._accounts, self._config = url, deliver, accounts, config
        self.replies = self.messages = 0

    def write(self, events: Sequence[ExportEvent]) -> None:
        ids = [e.id for e in events if e.kind == "replied"]
        if not ids:
            return
        with db.connect(self._url, autocommit=True) as conn:
            notices = inbound_store.inbound_reply_notices(conn, event_ids=ids)
        lines = reply_lines(self._accounts, notices, lines=self._config.notify_lines,
                            chars=self._config.notify_chars)
        subject, body = compose(notices, lines, masked=self._config.notify_mask == "on")
        self._deliver(subject, body)
        self.replies += len(notices)
        self.messages += 1
        log.info("reply notice delivered: %s repl(ies), events %s", len(notices), ids)


def notify_replies(url: str, deliver: Deliver, accounts: AccountLoader,
                   config: NotifySettings | None = None) -> NotifyResult:
    """Notify every reply event after the notifications' cursor.

    :param deliver: hands one message to the notifier (:data:`Deliver`).
    :param accounts: the IMAP accounts the replies are read from again (:data:`AccountLoader`).
    :param config: the settings (default :class:`outreach.settings.NotifySettings` from the environment).
    :raises outreach.db.OutreachDBError: the database cannot be reached.
    :raises Exception: whatever ``deliver`` raises; the next run delivers the batch again."""
    config = config or NotifySettings()
    with db.transaction(url) as conn:
        exports_store.export_cursor_ensure_at_end(conn, target=config.notify_target)
    target = _Notices(url, deliver, accounts, config)
    export(url, target, batch=BATCH)
    return NotifyResult(target.replies, target.messages)
