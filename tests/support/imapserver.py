"""A real IMAP server for tests: Dovecot (Debian's ``dovecot-imapd``) on a free loopback port, its
own config, password file and maildir in a temp dir, run unprivileged
(:class:`outreach.dev.devimap.DovecotServer`). Reusable: import the fixtures into a test module
(``from imapserver import dovecot, imap_accounts``) or use :class:`ImapAccounts` directly.

One Dovecot serves the whole session; each test gets its own accounts (unique logins), so tests
never see each other's mail, but for the accounts of the deployment the acceptance tests share
(``ImapAccounts.adopt``: made once per deployment, never emptied). Messages are delivered by IMAP
APPEND only.
"""

from __future__ import annotations

import uuid

import pytest

from outreach.dev.devimap import DovecotServer, DovecotUnavailable


@pytest.fixture(scope="session")
def dovecot() -> DovecotServer:
    """The session's Dovecot. Fails (not skips) when Dovecot is missing: `make test` and
    `.ci/run` install it (apt-get install dovecot-imapd)."""
    server = DovecotServer()
    try:
        server.start()
    except DovecotUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


class ImapAccounts:
    """Per-test accounts on the session's Dovecot: :meth:`add` creates one with a unique login
    and points the Airflow connection ``conn_id`` at it (``AIRFLOW_CONN_<ID>``)."""

    def __init__(self, server: DovecotServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.server = server
        self._monkeypatch = monkeypatch
        self.logins: dict[str, str] = {}

    def add(self, conn_id: str) -> str:
        """Create an account for connection ``conn_id``; return its login."""
        login = self.server.add_user(f"{conn_id}-{uuid.uuid4().hex[:8]}@imap.test")
        self.logins[conn_id] = login
        self._monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", self.server.connection_json(login))
        return login

    def adopt(self, logins: dict[str, str]) -> None:
        """Use accounts made elsewhere (``{conn_id: login}``, on this server) as if :meth:`add`
        had made them: a deployment's, whose environment names them."""
        for conn_id, login in logins.items():
            self.logins[conn_id] = login
            self._monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", self.server.connection_json(login))

    def append(self, conn_id: str, raw: bytes | str, folder: str = "INBOX") -> None:
        """APPEND one message to the account of ``conn_id``."""
        self.server.append(self.logins[conn_id], raw, folder)

    def env(self) -> dict[str, str]:
        """The ``AIRFLOW_CONN_*`` variables of every account (for a subprocess)."""
        return {f"AIRFLOW_CONN_{c.upper()}": self.server.connection_json(login)
                for c, login in self.logins.items()}


@pytest.fixture
def imap_accounts(dovecot: DovecotServer, monkeypatch: pytest.MonkeyPatch) -> ImapAccounts:
    """A fresh :class:`ImapAccounts` on the session's Dovecot."""
    return ImapAccounts(dovecot, monkeypatch)
