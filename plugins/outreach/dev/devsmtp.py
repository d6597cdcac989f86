"""A local SMTP server (aiosmtpd) that stores every accepted message in a Maildir.

Used by ``make demo`` and the tests as the "real SMTP server on loopback". Each stored message
gets aiosmtpd's ``X-MailFrom``/``X-RcptTo``/``X-Peer`` headers, so the envelope can be checked.
"""

from __future__ import annotations

import mailbox
import socket
from email.message import Message
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LoopbackSMTPServer:
    """An aiosmtpd server on loopback around ``handler``, in a background thread.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``port`` 0 picks a free port.
    """

    def __init__(self, handler: object, host: str = "127.0.0.1", port: int = 0, *,
                 smtputf8: bool = True, size_limit: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        # size_limit: bytes, advertised as EHLO SIZE (RFC 1870); aiosmtpd's default is 32 MiB.
        limits = {} if size_limit is None else {"data_size_limit": size_limit}
        self._controller = Controller(handler, hostname=host, port=self.port,
                                      enable_SMTPUTF8=smtputf8, **limits)

    def start(self):
        """Start serving in a background thread; return ``self``."""
        self._controller.start()
        return self

    def stop(self) -> None:
        """Stop the server."""
        self._controller.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def connection_json(self, timeout: float = 30) -> str:
        """Return an Airflow SMTP connection (JSON form) to this server: plain text, no retries
        inside the hook, ``timeout`` seconds per reply."""
        import json

        return json.dumps({"conn_type": "smtp", "host": self.host, "port": self.port,
                           "extra": {"disable_ssl": True, "disable_tls": True, "timeout": timeout,
                                     "retry_limit": 0}})


class MaildirServer(LoopbackSMTPServer):
    """A loopback SMTP server storing every accepted message in the Maildir ``maildir``."""

    def __init__(self, maildir: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.maildir = Path(maildir)
        self.maildir.parent.mkdir(parents=True, exist_ok=True)
        mailbox.Maildir(str(self.maildir), create=True)  # creates tmp/, new/, cur/
        super().__init__(Mailbox(self.maildir), host, port)

    def messages(self) -> list[Message]:
        """Return every stored message."""
        return read_maildir(self.maildir)


def read_maildir(path: Path) -> list[Message]:
    """Return every message stored in the Maildir at ``path`` (``[]`` if there is none)."""
    if not Path(path).exists():
        return []
    return [m for m in mailbox.Maildir(str(path), create=False)]


def empty_maildir(path: Path) -> None:
    """Remove every message stored in the Maildir at ``path`` (its folders stay)."""
    for sub in ("new", "cur", "tmp"):
        for f in (Path(path) / sub).glob("*"):
            f.unlink()
