"""Connections and secrets, read from Airflow at task time, never at import: the outreach database,
each mailbox's SMTP and IMAP connection, DKIM keys, the unsubscribe secret, the Postmaster
credentials and webhook secrets. Where each lives: docs/reference/configuration.md."""

from __future__ import annotations

import os
import smtplib
from typing import Any

DB_CONN_ID = "outreach_db"


UNSUBSCRIBE_CONN_ID = "outreach_unsubscribe"


POSTMASTER_CONN_ID = "outreach_postmaster"


def database_url(conn_id: str = DB_CONN_ID) -> str:
    """Return the outreach database URL: the Airflow connection ``conn_id``, else ``OUTREACH_DATABASE_URL``.

    No embedded fallback here (only the CLI's dev path and the local launchers use it).

    :raises outreach.settings.SettingsError: neither is configured (:data:`outreach.settings.NO_DATABASE`)."""
    from outreach.settings import NO_DATABASE, DatabaseSettings, SettingsError

    conn = _connection(conn_id)
    if conn is None:
        url = DatabaseSettings().database_url
        if not url:
            raise SettingsError(NO_DATABASE)
        return url
    from outreach.db import libpq_url

    return libpq_url(conn.get_uri())


def _connection(conn_id: str):
    """Return the Airflow connection ``conn_id``, or ``None`` when it does not exist.

    Outside a task and an Airflow server, Airflow looks a connection up only in a configured
    secrets backend and in ``AIRFLOW_CONN_<ID>`` (``ensure_secrets_backend_loaded``'s fallback
    chain, never the metadata database): when :func:`_nowhere_to_look` says neither can hold it,
    the answer is ``None`` without importing ``airflow.sdk`` (about a second of every CLI call)."""
    if _nowhere_to_look(conn_id):
        return None
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


SECRETS_BACKEND_KEYS = (("secrets", "backend"), ("workers", "secrets_backend"))
"""Where Airflow's configuration names a secrets backend (``[secrets] backend``; outside a server
``[workers] secrets_backend`` comes first: ``_get_custom_secret_backend``), each also read from
``AIRFLOW__<SECTION>__<KEY>`` and its ``_CMD`` and ``_SECRET`` forms."""


def _expand(path: str) -> str:
    """Expand ``$VARS`` and ``~`` until nothing changes, as Airflow's ``expand_env_var`` does."""
    while True:
        expanded = os.path.expanduser(os.path.expandvars(path))
        if expanded == path:
            return expanded
        path = expanded


def airflow_config_path() -> str:
    """The configuration file Airflow reads (``airflow.sdk.configuration.get_airflow_config``):
    ``AIRFLOW_CONFIG`` when set, else ``airflow.cfg`` in ``AIRFLOW_HOME`` (default ``~/airflow``;
    set but empty: the current directory)."""
    if "AIRFLOW_CONFIG" in os.environ:
        return _expand(os.environ["AIRFLOW_CONFIG"])
    return os.path.join(_expand(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow"))),
                        "airflow.cfg")


def _nowhere_to_look(conn_id: str) -> bool:
    """True when Airflow itself would find no connection ``conn_id`` here: this process is no
    task (no supervisor channel) and no Airflow server (``_AIRFLOW_PROCESS_CONTEXT`` unset),
    ``AIRFLOW_CONN_<ID>`` is not set, and no secrets backend is configured
    (:data:`SECRETS_BACKEND_KEYS`), neither in the environment nor in the configuration file
    (:func:`airflow_config_path`). Any doubt (an unreadable file) is False: Airflow decides."""
    import configparser
    import sys

    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    if runner is not None and getattr(runner, "SUPERVISOR_COMMS", None) is not None:
        return False
    if os.environ.get("_AIRFLOW_PROCESS_CONTEXT") or os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}"):
        return False
    for section, key in SECRETS_BACKEND_KEYS:
        name = f"AIRFLOW__{section.upper()}__{key.upper()}"
        if any(os.environ.get(name + suffix, "").strip() for suffix in ("", "_CMD", "_SECRET")):
            return False
    cfg = airflow_config_path()
    if not os.path.exists(cfg):
        return True
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(cfg, encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        return False
    return not any(parser.get(section, key + suffix, fallback="").strip()
                   for section, key in SECRETS_BACKEND_KEYS for suffix in ("", "_cmd", "_secret"))


def unsubscribe_secret(conn_id: str = UNSUBSCRIBE_CONN_ID) -> str:
    """Return the HMAC secret of unsubscribe tokens: ``OUTREACH_UNSUBSCRIBE_SECRET``, else the
    password of the Airflow connection ``outreach_unsubscribe``. The sender and the unsubscribe
    service both call this, so they always agree.

    :raises outreach.settings.SettingsError: neither is set.
    """
    from outreach.settings import SettingsError

    secret = os.environ.get("OUTREACH_UNSUBSCRIBE_SECRET")
    if not secret:
        conn = _connection(conn_id)
        secret = conn.password if conn is not None else None
    if not secret:
        raise SettingsError(f"set OUTREACH_UNSUBSCRIBE_SECRET or the password of the Airflow "
                            f"connection {conn_id!r} (see docs/reference/configuration.md)")
    return secret


def named_secret(ref: str) -> str:
    """Return the secret a reference names: ``env:NAME`` the environment variable ``NAME``,
    ``conn:ID`` the password of the Airflow connection ``ID`` (a webhook endpoint's
    ``secret_ref``: the database holds where a secret is, never the secret).

    :raises LookupError: the reference has neither form, or names nothing that is set (the
        message names the reference, never a value).
    """
    kind, _, name = ref.partition(":")
    secret = None
    if kind == "env" and name:
        secret = os.environ.get(name)
    elif kind == "conn" and name:
        conn = _connection(name)
        secret = conn.password if conn is not None else None
    else:
        raise LookupError(f"secret reference {ref[:80]!r} is neither env:NAME nor conn:ID")
    if not secret:
        raise LookupError(f"secret {ref} is not set (the environment variable, or the password "
                          "of the Airflow connection)")
    return secret


def settings(*, unsubscribe: bool = True):
    """Return :class:`outreach.settings.Settings` from the environment, with the unsubscribe
    secret from :func:`unsubscribe_secret`.

    :param unsubscribe: ``False`` for transactional sends only: no unsubscribe URL or secret
        is needed (see :meth:`outreach.settings.Settings.from_env`).
    :raises outreach.settings.SettingsError: a setting is missing or invalid.
    """
    from outreach.settings import Settings

    if not unsubscribe:
        return Settings.from_env(unsubscribe=False)
    return Settings.from_env(unsubscribe_secret=unsubscribe_secret())


def dkim_private_key(conn_id: str) -> bytes:
    r"""Return the PEM private key kept in an Airflow connection: its password, else its extra
    ``private_key`` (``\n`` escapes are turned into line breaks).

    :raises LookupError: no such connection, or it holds no key (the key is never in a message).
    """
    conn = _connection(conn_id)
    if conn is None:
        raise LookupError(f"no Airflow connection {conn_id!r} (DKIM key)")
    pem = conn.password or (conn.extra_dejson or {}).get("private_key") or ""
    pem = pem.replace("\\n", "\n").strip()
    if "PRIVATE KEY" not in pem:
        raise LookupError(f"Airflow connection {conn_id!r} holds no PEM private key "
                          "(password or extra private_key)")
    return pem.encode("ascii") + b"\n"


def smtp_connector(smtp_conn_id: str) -> smtplib.SMTP:
    """Open a connected, authenticated SMTP client for an Airflow SMTP connection, with its hook.

    Extra ``auth_type: oauth2`` logs in with XOAUTH2 (:mod:`outreach.oauth`). The hook's own
    ``send_email_smtp`` is not used: it retries the whole send on any error (duplicates) and adds no
    Message-ID or DKIM.

    :raises outreach.oauth.LoginRefused: the login was refused: noted for
        :func:`outreach.airflow.alerts.refused_logins`.
    :raises Exception: whatever the hook raises when it cannot connect (stage CONNECT)."""
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    from outreach import oauth

    oauth.forget(smtp_conn_id)  # a refusal noted by an earlier try is not this one's
    if _connection(smtp_conn_id) is None:
        raise smtplib.SMTPConnectError(
            -1, f"no Airflow connection {smtp_conn_id!r} (set AIRFLOW_CONN_{smtp_conn_id.upper()} "
                "or add it in the Airflow UI; see docs/reference/configuration.md)")
    conn = _connection(smtp_conn_id)
    oauth2 = oauth.config(smtp_conn_id, conn.login, conn.extra_dejson)
    if oauth2 is not None:  # extra auth_type oauth2: XOAUTH2 with a cached token (outreach.oauth)
        return oauth.smtp_login(oauth2)
    hook = SmtpHook(smtp_conn_id=smtp_conn_id)
    try:
        hook.get_conn()
    except smtplib.SMTPAuthenticationError as exc:  # 535: a person must fix the credentials
        if hook._smtp_client is not None:
            hook._smtp_client.close()
        # scrub: a server may quote the AUTH PLAIN/LOGIN response, the password in base64.
        raise oauth.note(oauth.LoginRefused(smtp_conn_id, f"SMTP login refused ({exc.smtp_code} "
                                            f"{oauth.scrub(exc.smtp_error, conn.password)})",
                                            oauth.BASIC_FIX)) from None
    client = hook._smtp_client  # the connected smtplib client the hook built (providers-smtp 3.2)
    if client is None:
        raise smtplib.SMTPConnectError(-1, f"SMTP hook for {smtp_conn_id!r} gave no client")
    return client


def imap_account(imap_conn_id: str):
    """Return the :class:`outreach.imap.ImapAccount` of an Airflow IMAP connection: host, port
    (default 993, or 143 with extra ``ssl: false``), login, password, extra ``ssl`` (default
    true: implicit TLS) and ``timeout`` (seconds, default 30).

    :raises LookupError: no such connection, or it has no host or login (the message names the
        connection and how to add it; never the password).
    """
    from outreach.imap import ImapAccount

    conn = _connection(imap_conn_id)
    if conn is None:
        raise LookupError(f"no Airflow connection {imap_conn_id!r} (set "
                          f"AIRFLOW_CONN_{imap_conn_id.upper()} or add it in the Airflow UI; "
                          "docs/howto/inbound-mail.md)")
    extra = conn.extra_dejson or {}
    ssl = str(extra.get("ssl", extra.get("use_ssl", True))).strip().lower() not in ("false", "0", "no")
    if not conn.host or not conn.login:
        raise LookupError(f"Airflow connection {imap_conn_id!r} needs a host and a login")
    from outreach import oauth

    return ImapAccount(imap_conn_id, conn.host, int(conn.port or (993 if ssl else 143)), conn.login,
                       conn.password or "", ssl, float(extra.get("timeout", 30)),
                       oauth.config(imap_conn_id, conn.login, extra))


def optional_unsubscribe_secret() -> str | None:
    """Return the unsubscribe secret (:func:`unsubscribe_secret`), or ``None`` when none is set
    (the inbox reader then handles a mailto unsubscribe by its sender's address)."""
    from outreach.settings import SettingsError

    try:
        return unsubscribe_secret()
    except SettingsError:
        return None


def postmaster_credentials(conn_id: str = POSTMASTER_CONN_ID) -> Any:
    """Return google-auth service-account credentials for the Postmaster Tools API.

    The connection's extra ``keyfile_dict`` (or the Google provider's prefixed one) or ``key_path``;
    scope ``postmaster.traffic.readonly``; the key is never logged.

    :raises outreach.postmaster.PostmasterError: the connection is missing or holds no usable key."""
    import json

    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from google.oauth2 import service_account

    from outreach.postmaster import SCOPE, PostmasterError

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        raise PostmasterError(f"Airflow connection {conn_id!r} is not defined (it holds the "
                              "Postmaster service account key)") from None
    info = extra.get("keyfile_dict") or extra.get("extra__google_cloud_platform__keyfile_dict")
    try:
        if isinstance(info, str):
            info = json.loads(info)
        if info:
            return service_account.Credentials.from_service_account_info(info, scopes=[SCOPE])
        if extra.get("key_path"):
            return service_account.Credentials.from_service_account_file(extra["key_path"],
                                                                         scopes=[SCOPE])
    except (ValueError, KeyError, OSError) as exc:
        # The message of a key-parsing error names the problem, never the key's content.
        raise PostmasterError(f"connection {conn_id!r}: unusable service account key "
                              f"({type(exc).__name__})") from None
    raise PostmasterError(f"connection {conn_id!r} has neither extra keyfile_dict nor key_path")
