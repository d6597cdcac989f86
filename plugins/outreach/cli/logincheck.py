"""``outreach mailbox check ADDRESS``: try a mailbox's SMTP and IMAP logins and say what works.

Each login is tried as the sender and the inbox reader log in (password or XOAUTH2); nothing is
sent or read. The lines name the connection, the method and what to fix; never a secret."""

from __future__ import annotations

import smtplib
from dataclasses import dataclass

from outreach import db
from outreach.logutil import mask, mask_addresses
from outreach.store import mailboxes as store


@dataclass(frozen=True)
class LoginCheck:
    """One login tried: ``protocol`` (``SMTP``/``IMAP``), ``conn_id``, ``method`` (``basic``,
    ``oauth2 google`` …), ``ok`` and ``detail`` (the failure, one line)."""

    protocol: str
    conn_id: str
    method: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        """``SMTP conn (method): login OK`` or ``… FAILED: reason; fix``."""
        head = f"{self.protocol} {self.conn_id} ({self.method}): "
        return head + ("login OK" if self.ok else f"FAILED: {self.detail}")


def _method(conn_id: str) -> str:
    from outreach import oauth
    from outreach.airflow.connections import _connection

    conn = _connection(conn_id)
    if conn is None:
        return "no connection"
    try:
        cfg = oauth.config(conn_id, conn.login, conn.extra_dejson)
    except oauth.OAuthError:
        return "oauth2 ?"
    return cfg.describe() if cfg else "basic"


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, smtplib.SMTPResponseException):  # str() is the (code, reply) tuple
        reply = exc.smtp_error.decode("utf-8", "replace") if isinstance(
            exc.smtp_error, bytes) else str(exc.smtp_error)
        text = reply if exc.smtp_code < 0 else f"{exc.smtp_code} {reply}"
    text = " ".join(text.split())
    return mask_addresses(text)[:600]


def check_smtp(conn_id: str) -> LoginCheck:
    """Connect and log in to the SMTP server of ``conn_id``, then QUIT."""
    from outreach.airflow.connections import smtp_connector

    method = _method(conn_id)
    try:
        client = smtp_connector(conn_id)
    except Exception as exc:  # noqa: BLE001 - refused, TLS, AUTH 535, OAuthError: all reported
        return LoginCheck("SMTP", conn_id, method, False, _one_line(exc))
    try:
        client.quit()
    except Exception:  # noqa: BLE001 - the login worked; a rude hang-up after QUIT is fine
        pass
    return LoginCheck("SMTP", conn_id, method, True)


def check_imap(conn_id: str) -> LoginCheck:
    """Connect and log in to the IMAP server of ``conn_id``, then LOGOUT."""
    from outreach.airflow.connections import imap_account
    from outreach.imap import ImapSession

    method = _method(conn_id)
    try:
        with ImapSession(imap_account(conn_id)):
            pass
    except Exception as exc:  # noqa: BLE001 - ImapError, LookupError, OAuthError: all reported
        return LoginCheck("IMAP", conn_id, method, False, _one_line(exc))
    return LoginCheck("IMAP", conn_id, method, True)


def declared_auth(mailbox_file: str | None, address: str) -> str | None:
    """Return the ``auth`` the mailbox file declares for ``address`` (``basic``/``oauth2``), or
    ``None`` (not declared, no such mailbox in the file, no file).

    :raises outreach.campaign.ConfigError: the file is invalid.
    """
    from pathlib import Path

    from outreach.campaign import load_mailboxes

    if not mailbox_file or not Path(mailbox_file).exists():
        return None
    return next((m.auth for m in load_mailboxes(mailbox_file)
                 if m.address.lower() == address.lower()), None)


def _against(check: LoginCheck, declared: str | None) -> LoginCheck:
    """A working login that disagrees with the mailbox file's ``auth`` still fails the check."""
    if declared is None or check.method.split()[0] == declared:
        return check
    detail = (f"include/mailboxes.yaml declares auth {declared} but the connection logs in with "
              f"{check.method}: set its extra auth_type to {declared!r} "
              "(docs/howto/oauth-mailboxes.md) or change the declaration")
    return LoginCheck(check.protocol, check.conn_id, check.method, False,
                      detail + ("" if check.ok else f"; and: {check.detail}"))


def check_mailbox(url: str, mailbox: str | int,
                  mailbox_file: str | None = None) -> tuple[str, list[LoginCheck]]:
    """Try the SMTP login and (when the mailbox has one) the IMAP login of a mailbox by id or
    address; return its masked address and the checks. A login whose method is not the ``auth``
    the mailbox file declares for the mailbox fails too (:func:`declared_auth`).

    :raises outreach.mailboxes.MailboxNotFound: no such mailbox.
    :raises outreach.campaign.ConfigError: the mailbox file is invalid.
    """
    from outreach.mailboxes import MailboxNotFound

    text = str(mailbox).strip()
    by_id = text.isdigit()
    with db.connect(url, autocommit=True) as conn:
        row = store.mailbox_connections(conn, mailbox_id=int(text) if by_id else None,
                                        address=None if by_id else text)
    if row is None:
        raise MailboxNotFound(f"no mailbox {mask(text) if '@' in text else text!r}")
    declared = declared_auth(mailbox_file, row.address)
    checks = [_against(check_smtp(row.smtp_conn_id), declared)]
    if row.imap_conn_id:
        checks.append(_against(check_imap(row.imap_conn_id), declared))
    return mask(row.address), checks
