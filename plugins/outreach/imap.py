r"""Reading an IMAP account: connect, log in, select read-only, search, fetch — each a named stage.

IMAPClient, not the Airflow IMAP hook (why: docs/howto/inbound-mail.md); the account lives in an
Airflow connection (:func:`outreach.airflow.connections.imap_account`). Every failure is an
:class:`ImapError` naming the stage (CONNECT, LOGIN, SELECT, SEARCH, FETCH, LIST)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FETCH_CHUNK = 25
"""Messages fetched per FETCH command (bounded memory; a bounce can carry a large original)."""
MAX_MESSAGE_BYTES = 1024 * 1024
"""Bytes of one message read at most (``BODY.PEEK[]<0.N>``, RFC 3501 §6.4.5 partial fetch):
the header, the text and a report's parts come first; what a 25 MB reply carries beyond (its
attachments) is never needed to classify it. Such a message is marked ``truncated``. Memory
of a read is then at most :data:`FETCH_CHUNK` × this, whatever the messages' sizes."""


class ImapError(RuntimeError):
    """An IMAP operation failed: ``stage`` (``CONNECT``, ``LOGIN``, ``SELECT``, ``SEARCH``,
    ``FETCH``, ``LIST``) and the server's or the network's reason, never the password."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"IMAP stage {stage}: {reason}")
        self.stage = stage
        self.reason = reason


@dataclass(frozen=True)
class ImapAccount:
    """How to reach one account: ``conn_id`` (the Airflow connection it came from), ``host``,
    ``port``, ``login``, ``password``, ``ssl`` (implicit TLS, port 993; ``False`` for plain IMAP
    on loopback), ``timeout`` (seconds per network operation)."""

    conn_id: str
    host: str
    port: int
    login: str
    password: str
    ssl: bool = True
    timeout: float = 30.0
    oauth: Any = None
    """An :class:`outreach.oauth.OAuthConfig`: log in with XOAUTH2 instead of the password."""

    def __repr__(self) -> str:  # never show the password
        return f"ImapAccount({self.conn_id!r}, {self.host}:{self.port}, ssl={self.ssl})"


@dataclass(frozen=True)
class Fetched:
    """One message read: its ``uid``, the ``raw`` bytes (``BODY.PEEK[]``) and the server's
    ``internaldate`` (aware, UTC, or ``None``)."""

    uid: int
    raw: bytes
    internaldate: dt.datetime | None
    truncated: bool = False  # larger than MAX_MESSAGE_BYTES: ``raw`` is its first part


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.replace("\r", " ").replace("\n", " ")[:300]


class ImapSession:
    """One logged-in IMAPClient session; a context manager that logs out on exit.

    :raises ImapError: at CONNECT or LOGIN when entering.
    """

    def __init__(self, account: ImapAccount) -> None:
        self.account = account
        self.client: Any = None

    def __enter__(self) -> ImapSession:
        from imapclient import IMAPClient

        from outreach import oauth

        oauth.forget(self.account.conn_id)  # a refusal noted by an earlier try is not this one's

        def connect() -> Any:
            try:
                return IMAPClient(self.account.host, port=self.account.port,
                                  ssl=self.account.ssl, timeout=self.account.timeout)
            except Exception as exc:  # noqa: BLE001 - socket, TLS, greeting: the CONNECT stage
                raise ImapError("CONNECT", _reason(exc)) from None

        if self.account.oauth is not None:  # XOAUTH2, the token refreshed once (outreach.oauth)
            from outreach.oauth import LoginProblem, imap_login

            try:
                self.client = imap_login(self.account.oauth, connect)
            except LoginProblem as exc:
                raise ImapError("LOGIN", str(exc)) from None
            return self
        self.client = connect()
        try:
            self.client.login(self.account.login, self.account.password)
        except Exception as exc:  # noqa: BLE001 - every failure here is the LOGIN stage's ImapError
            self.close()
            from imapclient.exceptions import LoginError

            if isinstance(exc, LoginError):  # NO [AUTHENTICATIONFAILED]: a person must fix it
                from outreach import oauth

                raise ImapError("LOGIN", str(oauth.note(oauth.LoginRefused(
                    self.account.conn_id,
                    f"IMAP login refused ({oauth.scrub(str(exc), self.account.password)})",
                    oauth.BASIC_FIX)))) from None
            from outreach import oauth

            raise ImapError("LOGIN", oauth.scrub(str(exc), self.account.password)) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Log out (best effort) and drop the connection."""
        if self.client is None:
            return
        try:
            self.client.logout()
        except Exception:  # noqa: BLE001 - the connection may already be gone
            try:
                self.client.shutdown()
            except Exception:  # noqa: BLE001 - best effort: the connection may already be gone
                pass
        self.client = None

    def select(self, folder: str = "INBOX") -> int:
        """Select ``folder`` read-only (nothing is flagged or expunged); return its UIDVALIDITY.

        :raises ImapError: at SELECT.
        """
        try:
            info = self.client.select_folder(folder, readonly=True)
            return int(info[b"UIDVALIDITY"])
        except Exception as exc:  # noqa: BLE001 - every failure here is this stage's ImapError
            raise ImapError("SELECT", f"{folder}: {_reason(exc)}") from None

    def uids_after(self, last_uid: int, since: dt.date | None = None) -> list[int]:
        """Return the UIDs above ``last_uid`` in the selected folder, ascending, received on or after
        ``since`` when given (``UID n:*`` also returns the highest message, so the result is filtered).

        :raises ImapError: at SEARCH."""
        criteria: list[Any] = ["UID", f"{last_uid + 1}:*"]
        if since is not None:
            criteria += ["SINCE", since]
        try:
            return sorted(u for u in self.client.search(criteria) if u > last_uid)
        except Exception as exc:  # noqa: BLE001 - every failure here is this stage's ImapError
            raise ImapError("SEARCH", _reason(exc)) from None

    def fetch(self, uids: list[int]) -> Iterator[Fetched]:
        r"""Yield the messages ``uids`` with ``BODY.PEEK[]<0.N>`` (never sets ``\Seen``; at
        most :data:`MAX_MESSAGE_BYTES` of each, with ``RFC822.SIZE`` saying whether it was cut),
        in UID order, :data:`FETCH_CHUNK` at a time. A UID expunged meanwhile is skipped.

        :raises ImapError: at FETCH.
        """
        part = f"BODY.PEEK[]<0.{MAX_MESSAGE_BYTES}>"
        for start in range(0, len(uids), FETCH_CHUNK):
            chunk = uids[start:start + FETCH_CHUNK]
            try:
                data = self.client.fetch(chunk, [part, "INTERNALDATE", "RFC822.SIZE"])
            except Exception as exc:  # noqa: BLE001 - every failure here is this stage's ImapError
                raise ImapError("FETCH", _reason(exc)) from None
            for uid in chunk:
                item = data.pop(uid, None)
                body = None if not item else next(
                    (v for k, v in item.items() if k.startswith(b"BODY[]")), None)
                if body is None:
                    continue
                when = item.get(b"INTERNALDATE")
                if isinstance(when, dt.datetime):
                    when = (when.astimezone(dt.UTC) if when.tzinfo
                            else when.replace(tzinfo=dt.UTC))
                size = int(item.get(b"RFC822.SIZE") or 0)
                yield Fetched(uid, bytes(body), when, size > MAX_MESSAGE_BYTES)

    def sent_folder(self) -> str | None:
        r"""Return the folder flagged ``\Sent`` (special use, RFC 6154: Gmail's
        ``[Gmail]/Sent Mail``, Outlook's ``Sent Items``), or ``None`` when there is none.

        :raises ImapError: at LIST.
        """
        from imapclient.imapclient import SENT

        try:
            for flags, _delim, name in self.client.list_folders():
                if SENT in flags:
                    return name
            return None
        except Exception as exc:  # noqa: BLE001 - every failure here is this stage's ImapError
            raise ImapError("LIST", _reason(exc)) from None

    def find_message_id(self, message_id: str) -> dt.datetime | None:
        """Search the selected folder for ``Message-ID: <message_id>`` (``SEARCH HEADER``,
        RFC 3501 §6.4.4); return the INTERNALDATE of the first match (UTC), or ``None``.

        :raises ImapError: at SEARCH or FETCH.
        """
        try:
            found = self.client.search(["HEADER", "Message-ID", f"<{message_id}>"])
        except Exception as exc:  # noqa: BLE001 - every failure here is this stage's ImapError
            raise ImapError("SEARCH", _reason(exc)) from None
        if not found:
            return None
        try:
            item = self.client.fetch([min(found)], ["INTERNALDATE"]).get(min(found), {})
        except Exception as exc:  # noqa: BLE001 - every failure here is this stage's ImapError
            raise ImapError("FETCH", _reason(exc)) from None
        when = item.get(b"INTERNALDATE")
        if isinstance(when, dt.datetime):
            return when.astimezone(dt.UTC) if when.tzinfo else when.replace(tzinfo=dt.UTC)
        return dt.datetime.now(dt.UTC)
