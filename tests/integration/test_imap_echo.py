"""An IMAP server that quotes what the client sent in its refusal (the XOAUTH2 response in
base64, or the LOGIN command's password): the ImapError and LoginRefused texts (the task's
failure, the login alert, ``outreach mailbox check``) carry neither the token nor the password.
The server is a few lines of socket code on loopback: Dovecot never quotes a credential."""

from __future__ import annotations

import socket
import threading

import pytest

from outreach import oauth
from outreach.imap import ImapAccount, ImapError, ImapSession

TOKEN = "ya29.imap-token-that-must-stay-secret-0123456789"
PASSWORD = "hunter2-imap-horse"


@pytest.fixture
def echo_imap():
    """Greets, offers AUTH=XOAUTH2, and refuses every LOGIN and AUTHENTICATE quoting it."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb", buffering=0) as f:
            _converse(f)

    def _converse(f) -> None:
        f.write(b"* OK [CAPABILITY IMAP4rev1 AUTH=XOAUTH2] ready\r\n")
        while not stop.is_set():
            line = f.readline()
            if not line:
                return
            tag, _, rest = line.decode().strip().partition(" ")
            verb = rest.split(" ", 1)[0].upper()
            if verb == "CAPABILITY":
                f.write(b"* CAPABILITY IMAP4rev1 AUTH=XOAUTH2\r\n" + tag.encode() + b" OK done\r\n")
            elif verb == "AUTHENTICATE":
                f.write(b"+ \r\n")
                blob = f.readline().decode().strip()
                f.write(f"{tag} NO [AUTHENTICATIONFAILED] refused: {blob}\r\n".encode())
            elif verb == "LOGIN":
                f.write(f"{tag} NO [AUTHENTICATIONFAILED] refused: {rest}\r\n".encode())
            elif verb == "LOGOUT":
                f.write(b"* BYE\r\n" + tag.encode() + b" OK bye\r\n")
                return
            else:
                f.write(tag.encode() + b" BAD unknown\r\n")

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()


def _account(port: int, oauth_cfg=None) -> ImapAccount:
    return ImapAccount("outreach_imap_echo", "127.0.0.1", port, "anna@example.com", PASSWORD,
                       ssl=False, timeout=5, oauth=oauth_cfg)


def test_an_echoed_xoauth2_response_is_not_in_the_imap_refusal(echo_imap):
    oauth.CACHE.clear()
    cfg = oauth.config("outreach_imap_echo", "anna@example.com",
                       {"auth_type": "oauth2", "oauth2_provider": "token", "access_token": TOKEN})
    with pytest.raises(ImapError) as refused:
        with ImapSession(_account(echo_imap, cfg)):
            pass
    text = str(refused.value)
    assert "refused" in text and TOKEN not in text, text
    assert "dXNlcj1hbm5h" not in text, text  # base64 of "user=anna…": the XOAUTH2 response


def test_an_echoed_password_is_not_in_the_imap_refusal(echo_imap):
    with pytest.raises(ImapError) as refused:
        with ImapSession(_account(echo_imap)):
            pass
    text = str(refused.value)
    assert "refused" in text and PASSWORD not in text, text
