r"""A local IMAP server (Dovecot) for ``make demo`` and the tests: the "real IMAP server on loopback".

Each :class:`DovecotServer` writes its own configuration, password file, maildir and run
directory into a fresh temporary directory, listens on a free loopback port and runs in the
foreground as an unprivileged user (``nobody`` under root); every account has a ``\Sent`` folder
(RFC 6154). Messages arrive by IMAP APPEND, UIDVALIDITY changes through ``doveadm``."""

from __future__ import annotations

import grp
import imaplib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from outreach.dev.devsmtp import free_port

INSTALL_HINT = "install Dovecot: apt-get install dovecot-imapd (docs/tutorial/first-campaign.md)"


class DovecotUnavailable(RuntimeError):
    """Dovecot is not installed, or could not be started (the message says what to do)."""


def dovecot_binary() -> str | None:
    """Return the path of the ``dovecot`` binary, or ``None`` when it is not installed."""
    return shutil.which("dovecot") or (
        "/usr/sbin/dovecot" if os.access("/usr/sbin/dovecot", os.X_OK) else None)


def _run_as() -> tuple[str, int, int]:
    """Return the user Dovecot runs as: ``(name, uid, gid)``; ``nobody`` when we are root."""
    if os.geteuid() == 0:
        pw = pwd.getpwnam("nobody")
    else:
        pw = pwd.getpwuid(os.geteuid())
    return pw.pw_name, pw.pw_uid, pw.pw_gid


_CONFIG = """\
# Written by outreach.dev.devimap: a throw-away Dovecot for tests and the demo. No system config.
protocols = imap
listen = 127.0.0.1
base_dir = {dir}/run
state_dir = {dir}/state
instance_name = outreach-{port}
log_path = {dir}/dovecot.log
info_log_path = {dir}/dovecot.log
default_internal_user = {user}
default_internal_group = {group}
default_login_user = {user}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {dir}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={dir}/mail/%u
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Sent {{
    special_use = \\Sent
    auto = subscribe
  }}
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"""


def _with_oauth2(config: str, d: Path, introspection_url: str) -> str:
    """Add SASL XOAUTH2 and OAUTHBEARER logins to ``config``: Dovecot's ``oauth2`` passdb
    (Dovecot 2.3) posts each bearer token to ``introspection_url`` (RFC 7662: ``token=…``) and
    accepts it when the answer says ``"active": true`` and its ``username`` is the login; the
    password logins keep their passwd-file."""
    (d / "oauth2.conf.ext").write_text(
        f"introspection_mode = post\nintrospection_url = {introspection_url}\n"
        "force_introspection = yes\nusername_attribute = username\n"
        "active_attribute = active\nactive_value = true\n")
    config = config.replace("auth_mechanisms = plain login",
                            "auth_mechanisms = plain login xoauth2 oauthbearer")
    return config.replace("passdb {\n  driver = passwd-file\n",
                          "passdb {\n  driver = oauth2\n  mechanisms = xoauth2 oauthbearer\n"
                          f"  args = {d}/oauth2.conf.ext\n}}\n"
                          "passdb {\n  driver = passwd-file\n  mechanisms = plain login\n")


class DovecotServer:
    """One Dovecot instance on ``127.0.0.1:port`` with its own files in ``directory``; a context manager.

    :meth:`add_user`, :meth:`append` (IMAP APPEND), :meth:`connection_json` (an Airflow connection).

    :raises DovecotUnavailable: from :meth:`start`: not installed or not up (its log is quoted)."""

    def __init__(self, directory: str | Path | None = None, *,
                 oauth2_introspection_url: str | None = None) -> None:
        self.oauth2_introspection_url = oauth2_introspection_url
        self.host = "127.0.0.1"
        self.port = free_port(self.host)
        self.directory = Path(directory) if directory else None
        self._own_dir = directory is None
        self._proc: subprocess.Popen | None = None
        self._passwords: dict[str, str] = {}
        self.user, self.uid, self.gid = _run_as()

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> DovecotServer:
        """Write the configuration, start Dovecot in the foreground and wait until it answers."""
        binary = dovecot_binary()
        if binary is None:
            raise DovecotUnavailable(f"Dovecot is not installed: {INSTALL_HINT}")
        if self.directory is None:
            # Not under pytest's basetemp: that is private to root, and Dovecot runs as nobody.
            self.directory = Path(tempfile.mkdtemp(prefix="outreach-dovecot-"))
        d = self.directory
        for sub in ("run", "state", "mail"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        group = grp.getgrgid(self.gid).gr_name
        config = _CONFIG.format(dir=d, port=self.port, user=self.user, group=group,
                                uid=self.uid, gid=self.gid)
        if self.oauth2_introspection_url:
            config = _with_oauth2(config, d, self.oauth2_introspection_url)
        (d / "dovecot.conf").write_text(config)
        self._write_users()
        if os.geteuid() == 0:
            for path in [d, *d.rglob("*")]:
                os.chown(path, self.uid, self.gid)
        self._proc = subprocess.Popen([binary, "-F", "-c", str(d / "dovecot.conf")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      preexec_fn=self._drop_privileges, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise DovecotUnavailable(f"Dovecot exited at start ({self._proc.returncode}): "
                                         f"{err.strip()} {self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"* OK"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise DovecotUnavailable(f"Dovecot did not answer on {self.host}:{self.port}: {self.log_tail()}")

    def _drop_privileges(self) -> None:  # runs in the child, before exec
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)

    def stop(self) -> None:
        """Stop Dovecot (SIGTERM to its master process, which ends its children) and remove
        the temporary directory it was given none."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        if self._proc is not None and self._proc.stderr:
            self._proc.stderr.close()
        self._proc = None
        if self._own_dir and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> DovecotServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        """Return the last lines of Dovecot's log (for error messages)."""
        try:
            return "\n".join((self.directory / "dovecot.log").read_text(errors="replace")
                             .splitlines()[-lines:])
        except (OSError, TypeError):
            return ""

    # -- accounts and mail -------------------------------------------------------------------
    def _write_users(self) -> None:
        if self.directory is None:
            return
        path = self.directory / "users"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(f"{u}:{{PLAIN}}{p}::::::\n" for u, p in self._passwords.items()))
        if os.geteuid() == 0:
            os.chown(tmp, self.uid, self.gid)
        tmp.replace(path)  # atomic: Dovecot never reads half a file
        # Dovecot re-reads a changed passwd-file only when it looks at it again, at most once a
        # second: a login right after adding an account failed (AUTHENTICATIONFAILED) in the
        # full suite. Wait that second out (development and test tooling only).
        time.sleep(1.1)

    def add_user(self, login: str, password: str = "secret") -> str:
        """Create (or change the password of) the account ``login``; return ``login``."""
        if ":" in login or "\n" in login or ":" in password or "\n" in password:
            raise ValueError("login and password must not contain ':' or a line break")
        self._passwords[login] = password
        self._write_users()
        return login

    def client(self, login: str) -> imaplib.IMAP4:
        """Return a logged-in :mod:`imaplib` client for ``login`` (the test side's own client,
        independent of the product's IMAPClient)."""
        c = imaplib.IMAP4(self.host, self.port, timeout=10)
        c.login(login, self._passwords[login])
        return c

    def append(self, login: str, raw: bytes | str, folder: str = "INBOX") -> None:
        """Deliver one message into ``folder`` of ``login`` by IMAP APPEND."""
        data = raw.encode("utf-8") if isinstance(raw, str) else raw
        data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        c = self.client(login)
        try:
            typ, resp = c.append(folder, None, None, data)
            if typ != "OK":
                raise RuntimeError(f"APPEND to {folder} failed: {resp}")
        finally:
            c.logout()

    def count(self, login: str, folder: str = "INBOX") -> int:
        """Return how many messages ``folder`` of ``login`` holds."""
        c = self.client(login)
        try:
            typ, data = c.select(folder, readonly=True)
            return int(data[0])
        finally:
            c.logout()

    def set_uidvalidity(self, login: str, value: int, folder: str = "INBOX") -> None:
        """Give ``folder`` a new UIDVALIDITY with Dovecot's own ``doveadm`` (what a server
        rebuild or a restored backup does: every UID the client knew is void, RFC 3501
        §2.3.1.1)."""
        doveadm = shutil.which("doveadm") or "/usr/bin/doveadm"
        subprocess.run([doveadm, "-c", str(self.directory / "dovecot.conf"), "mailbox", "update",
                        "-u", login, "--uid-validity", str(value), folder],
                       check=True, capture_output=True, preexec_fn=self._drop_privileges)

    def connection_json(self, login: str, timeout: float = 10) -> str:
        """Return an Airflow IMAP connection (JSON form) to ``login``'s account: plain IMAP on
        loopback (extra ``ssl: false``), ``timeout`` seconds per network operation."""
        return json.dumps({"conn_type": "imap", "host": self.host, "port": self.port,
                           "login": login, "password": self._passwords[login],
                           "extra": {"ssl": False, "timeout": timeout}})
