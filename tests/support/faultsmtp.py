"""A fault-injection SMTP server on loopback (aiosmtpd), reusable by tests and benchmarks.

Behaviour is chosen per recipient (a list of actions, one per attempt, the last one repeating)
or per Nth message overall. Actions:

* ``accept`` — 250 to the end of DATA.
* ``rcpt_421`` / ``rcpt_451`` / ``rcpt_452`` / ``rcpt_550`` / ``rcpt_571`` — that reply to RCPT TO.
* ``data_451`` / ``data_554`` — that reply after the end of DATA (the message is not accepted).
* ``drop`` — take the data, store it, and drop the connection without replying.
* ``slow`` — take the data, store it, and reply 250 only after ``slow_seconds`` (later than the
  client's timeout).
* ``hook`` — call ``on_message(n)`` (from a worker thread) before replying 250.

Every message the server took (accept, drop, slow, hook) is recorded in :attr:`accepted` with its
Message-ID, recipient and time, and returned by :meth:`messages` for the invariant checker.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email
import email.policy
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message

from outreach.dev.devsmtp import LoopbackSMTPServer

REPLIES = {
    "rcpt_421": "421 4.3.2 Service shutting down, closing channel",
    "rcpt_451": "451 4.3.0 Temporary local problem, try later",
    "rcpt_452": "452 4.2.2 Mailbox full",
    "rcpt_550": "550 5.1.1 <{rcpt}>: Recipient address rejected: no such user here",
    "rcpt_571": "550 5.7.1 <{rcpt}>: Message rejected due to local policy",
    "data_451": "451 4.7.1 Greylisted, try again later",
    "data_554": "554 5.7.1 Message rejected as spam",
}


@dataclass(frozen=True)
class Accepted:
    """One message the server took: ``message_id`` (no brackets), ``recipient``, ``at`` (UTC),
    ``action`` and the parsed ``message``."""

    message_id: str
    recipient: str
    at: dt.datetime
    action: str
    message: Message


class _Handler:
    def __init__(self, server: FaultSMTPServer) -> None:
        self.s = server

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        action = self.s._action(address, peek=True)
        if action.startswith("rcpt_"):
            self.s._action(address)  # consume this attempt
            return REPLIES[action].format(rcpt=address)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        rcpt = envelope.rcpt_tos[0]
        with self.s._lock:
            self.s.message_count += 1
            n = self.s.message_count
        action = self.s._action(rcpt, n=n)
        if action in ("data_451", "data_554"):
            return REPLIES[action]
        msg = email.message_from_bytes(envelope.content, policy=email.policy.compat32)
        msg["X-RcptTo"] = rcpt
        msg["X-MailFrom"] = envelope.mail_from
        self.s._record(Accepted((msg["Message-ID"] or "").strip().strip("<>"), rcpt,
                                dt.datetime.now(dt.UTC), action, msg))
        if action == "drop":
            session_transport = server.transport
            if session_transport is not None:
                session_transport.abort()
            return "250 OK (never delivered to the client)"
        if action == "slow":
            await asyncio.sleep(self.s.slow_seconds)
        if action == "hook" and self.s.on_message is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.s.on_message, n)
        return "250 2.0.0 OK queued"


class FaultSMTPServer(LoopbackSMTPServer):
    """The fault-injection server. ``rules``: ``{recipient: [action, …]}``; ``nth``:
    ``{message number: action}`` (1-based, counted at DATA); ``slow_seconds``: the delay of
    ``slow``; ``on_message``: the ``hook`` callback; ``smtputf8``: whether EHLO offers SMTPUTF8;
    ``size_limit``: the EHLO SIZE in bytes (``None``: aiosmtpd's 32 MiB)."""

    def __init__(self, rules: dict[str, list[str]] | None = None, nth: dict[int, str] | None = None,
                 slow_seconds: float = 3.0, on_message: Callable[[int], None] | None = None,
                 *, smtputf8: bool = True, size_limit: int | None = None) -> None:
        self.rules = {k.lower(): list(v) for k, v in (rules or {}).items()}
        self.nth = dict(nth or {})
        self.slow_seconds = slow_seconds
        self.on_message = on_message
        self.accepted: list[Accepted] = []
        self.attempts: Counter[str] = Counter()
        self.message_count = 0
        self._lock = threading.Lock()
        super().__init__(_Handler(self), smtputf8=smtputf8, size_limit=size_limit)

    def _action(self, rcpt: str, *, n: int | None = None, peek: bool = False) -> str:
        rcpt = rcpt.lower()
        with self._lock:
            if n is not None and n in self.nth:
                self.attempts[rcpt] += 1
                return self.nth[n]
            plan = self.rules.get(rcpt, ["accept"])
            i = self.attempts[rcpt]
            if not peek:
                self.attempts[rcpt] += 1
            return plan[min(i, len(plan) - 1)]

    def _record(self, item: Accepted) -> None:
        with self._lock:
            self.accepted.append(item)

    def messages(self) -> list[Message]:
        """Every message taken, parsed, with ``X-RcptTo``/``X-MailFrom`` added."""
        with self._lock:
            return [a.message for a in self.accepted]
