"""OAuth 2.0 access tokens for SMTP and IMAP logins (SASL ``XOAUTH2``), one place for both.

A connection's extra says ``{"auth_type": "oauth2", "oauth2_provider": "google" | "microsoft" |
"token", ...}``; the XOAUTH2 user is the connection's login. Google: a service account with
domain-wide delegation (RFC 7523 JWT bearer); Microsoft: an Entra app's client credentials
(MSAL); token: a static ``access_token``. Tokens are cached per process (:data:`CACHE`),
refreshed once on a refusal and never logged, stored or returned from a task; every failure is
one :class:`OAuthError` line. Set-up and fields: docs/howto/oauth-mailboxes.md."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

GOOGLE_SCOPE = "https://mail.google.com/"
"""The only Google scope that covers IMAP, POP and SMTP (Gmail's XOAUTH2)."""
MICROSOFT_SCOPE = "https://outlook.office365.com/.default"
"""Exchange Online's resource for SMTP AUTH and IMAP with client credentials (the granted
application permissions ``SMTP.SendAsApp`` and ``IMAP.AccessAsApp`` come with ``.default``)."""
EARLY_REFRESH = 300.0
"""Seconds before its expiry a cached token is no longer used (a session opened with it must
still log in; Google's and Microsoft's tokens last 3600 s)."""
TOKEN_TIMEOUT = 30.0
"""Seconds a token-endpoint request may take when the connection's extra sets no ``timeout``
(the SMTP provider's and the IMAP client's default too)."""
PROVIDERS = ("google", "microsoft", "token")

T = TypeVar("T")


class LoginProblem(RuntimeError):
    """A login could not be made: ``conn_id``, ``reason``, ``fix``; ``str()`` is the one line
    ``Airflow connection 'x': reason; fix``. Never carries a token, a key or a password."""

    def __init__(self, conn_id: str, reason: str, fix: str) -> None:
        self.conn_id, self.reason, self.fix = conn_id, reason, fix
        super().__init__(f"Airflow connection {conn_id!r}: {reason}; {fix}")


class TokenUnavailable(LoginProblem):
    """The token endpoint could not be reached (network, DNS, TLS): transient, so the tasks
    retry as for an unreachable relay; no alert of its own."""


class LoginRefused(LoginProblem):
    """A login failed for a reason only a person can fix: the connection's problem, never a message's.

    ``conn_id``, ``reason`` and ``fix``; ``str()`` is ``Airflow connection 'x': reason; fix``, never
    a secret. Each is noted (:func:`take_refusals`): tasks fail without retry and alert once per
    connection and day (:func:`outreach.airflow.alerts.refused_logins`)."""


class OAuthError(LoginRefused):
    """No OAuth 2.0 token could be had, or the server refused a fresh one (see
    :class:`LoginRefused`)."""


_refusals: dict[str, LoginRefused] = {}
_refusals_lock = threading.Lock()


def note(exc: LoginRefused) -> LoginRefused:
    """Remember ``exc`` as the latest login refusal of its connection in this process; return
    it (``raise note(LoginRefused(…))``)."""
    with _refusals_lock:
        _refusals[exc.conn_id] = exc
    return exc


def forget(conn_id: str) -> None:
    """Drop the noted refusal of ``conn_id``: called when a login of it starts, so a note only
    ever describes the latest try (a long-lived process, a transient failure after a fix)."""
    with _refusals_lock:
        _refusals.pop(conn_id, None)


def take_refusals(conn_ids: list[str] | set[str]) -> list[LoginRefused]:
    """Return (and forget) the noted login refusals of ``conn_ids``, in the order given."""
    with _refusals_lock:
        return [r for c in dict.fromkeys(conn_ids) if (r := _refusals.pop(c, None)) is not None]


@dataclass(frozen=True)
class OAuthConfig:
    """How one connection gets its token: ``conn_id``, ``provider`` (:data:`PROVIDERS`),
    ``user`` (the XOAUTH2 user and Google's ``sub``: the connection's login) and ``extra`` (the
    connection's extra: the key or the client secret; never shown by ``repr``)."""

    conn_id: str
    provider: str
    user: str
    extra: dict[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """The cache key: ``(conn_id, provider, user)``."""
        return (self.conn_id, self.provider, self.user)

    @property
    def scope(self) -> str:
        """The one scope asked for: :data:`GOOGLE_SCOPE`, or :data:`MICROSOFT_SCOPE` (extra
        ``scope`` may override it for Microsoft's sovereign clouds)."""
        if self.provider == "microsoft":
            return str(self.extra.get("scope") or MICROSOFT_SCOPE)
        return GOOGLE_SCOPE

    def describe(self) -> str:
        """``oauth2 google`` style text for ``outreach mailbox check``."""
        return f"oauth2 {self.provider}"


def config(conn_id: str, login: str | None, extra: dict[str, Any] | None) -> OAuthConfig | None:
    """Return the OAuth settings of a connection, or ``None`` for a password (basic) login.

    ``oauth2_provider`` may be left out when the extra says it unambiguously: a key
    (``keyfile_dict``/``key_path``) is Google, ``client_id`` Microsoft, ``access_token`` a token.

    :raises OAuthError: ``auth_type`` is neither ``basic`` nor ``oauth2``, the provider is
        unknown, or the login is missing.
    """
    extra = dict(extra or {})
    kind = str(extra.get("auth_type") or "basic").strip().lower()
    if kind == "basic":
        return None
    if kind != "oauth2":
        raise note(OAuthError(conn_id, f"extra auth_type {kind!r} is not known",
                         "set auth_type to 'basic' or 'oauth2'"))
    provider = str(extra.get("oauth2_provider") or "").strip().lower()
    if not provider:
        provider = ("google" if ("keyfile_dict" in extra or "key_path" in extra)
                    else "microsoft" if "client_id" in extra
                    else "token" if "access_token" in extra else "")
    if provider not in PROVIDERS:
        raise note(OAuthError(conn_id, f"extra oauth2_provider {provider!r} is not known",
                         "set oauth2_provider to google, microsoft or token "
                         "(docs/howto/oauth-mailboxes.md)"))
    if not login:
        raise note(OAuthError(conn_id, "no login", "set the connection's login to the mailbox "
                              "address (the XOAUTH2 user)"))
    return OAuthConfig(conn_id, provider, login.strip(), extra)


# --- fetching a token --------------------------------------------------------------------------

_GOOGLE_FIXES = {
    "unauthorized_client": (
        f"domain-wide delegation for scope {GOOGLE_SCOPE} not granted: in the Admin console, "
        "Security > Access and data control > API controls > Domain-wide delegation, add the "
        "service account's client ID {client_id} with that scope"),
    "access_denied": (
        f"domain-wide delegation for scope {GOOGLE_SCOPE} not granted to client ID {{client_id}}"
        " (Admin console > API controls > Domain-wide delegation)"),
    "invalid_scope": f"grant exactly the scope {GOOGLE_SCOPE} to client ID {{client_id}}",
}


def _timeout(cfg: OAuthConfig) -> float:
    """Seconds one token-endpoint request may take: the extra's ``timeout``, else :data:`TOKEN_TIMEOUT`.

    MSAL has no timeout of its own: a silent endpoint would hold the task and the cache's lock
    forever. A timeout is transient (:class:`TokenUnavailable`)."""
    try:
        seconds = float(cfg.extra.get("timeout") or TOKEN_TIMEOUT)
    except (TypeError, ValueError):
        seconds = TOKEN_TIMEOUT
    return seconds if seconds > 0 else TOKEN_TIMEOUT


def _google_key(cfg: OAuthConfig) -> dict[str, Any]:
    raw = cfg.extra.get("keyfile_dict")
    try:
        if raw is None and cfg.extra.get("key_path"):
            with open(str(cfg.extra["key_path"]), encoding="utf-8") as fh:
                raw = fh.read()
        info = json.loads(raw) if isinstance(raw, str) else raw
    except (OSError, ValueError) as exc:
        raise OAuthError(cfg.conn_id, f"the service-account key cannot be read "
                         f"({type(exc).__name__})", "put the JSON key in the extra keyfile_dict "
                         "or a readable file path in key_path") from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise OAuthError(cfg.conn_id, "no service-account JSON key in the extra",
                         "put the key (IAM > Service accounts > Keys > JSON) in keyfile_dict")
    return info


def _google_token(cfg: OAuthConfig) -> tuple[str, float]:
    import google.auth.exceptions
    import google.auth.transport.requests
    from google.oauth2 import service_account

    info = _google_key(cfg)
    client_id = info.get("client_id", "?")
    try:
        creds = service_account.Credentials.from_service_account_info(
            info, scopes=[GOOGLE_SCOPE], subject=cfg.user)
    except (ValueError, KeyError, TypeError) as exc:
        raise OAuthError(cfg.conn_id, f"the service-account key is not usable "
                         f"({type(exc).__name__})", "download a new JSON key of the service "
                         "account into keyfile_dict") from None
    try:
        creds.refresh(functools.partial(google.auth.transport.requests.Request(),
                                        timeout=_timeout(cfg)))
    except google.auth.exceptions.RefreshError as exc:
        data = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], dict) else {}
        code = str(data.get("error") or "refused")
        text = str(data.get("error_description") or "")[:200]
        if getattr(exc, "retryable", False):  # 5xx, internal_failure: Google's, not ours
            raise TokenUnavailable(cfg.conn_id, f"Google's token endpoint failed ({code}: {text})",
                                   "nothing to fix here; the run is tried again") from None
        fix = _GOOGLE_FIXES.get(code)
        if fix is None and "signature" in text.lower():
            fix = ("the service-account key was deleted, disabled or is not this account's: "
                   "create a new key and put it in keyfile_dict")
        elif fix is None:
            fix = (f"check that {_masked(cfg.user)} is an active user of the Workspace domain and "
                   "the service account and its key are enabled")
        raise OAuthError(cfg.conn_id, f"Google refused the token request ({code}: {text})",
                         fix.format(client_id=client_id)) from None
    except google.auth.exceptions.TransportError as exc:
        raise TokenUnavailable(cfg.conn_id, f"Google's token endpoint could not be reached "
                         f"({type(exc).__name__})", "check the network path to the key's "
                         "token_uri; the run is tried again") from None
    expiry = creds.expiry  # naive UTC (google-auth)
    expires = (expiry.replace(tzinfo=dt.UTC).timestamp() if expiry
               else time.time() + 3600)
    return creds.token, expires


_MICROSOFT_FIXES = {
    "AADSTS7000215": "the client secret is wrong: create a new one (Entra admin center > App "
                     "registrations > Certificates & secrets) and put it in client_secret",
    "AADSTS7000222": "the client secret has expired: create a new one and put it in client_secret",
    "AADSTS700016": "no such application in the tenant: check tenant_id and client_id",
    "AADSTS90002": "no such tenant: check tenant_id",
    "AADSTS700027": "the certificate is not registered with the application or its thumbprint "
                    "is wrong",
    "AADSTS65001": "admin consent not granted: grant admin consent for the application's "
                   "Office 365 Exchange Online permissions",
    "AADSTS1002012": f"ask for the scope {MICROSOFT_SCOPE}",
}


def _microsoft_token(cfg: OAuthConfig) -> tuple[str, float]:
    import msal

    extra = cfg.extra
    tenant = str(extra.get("tenant_id") or "").strip()
    client_id = str(extra.get("client_id") or "").strip()
    credential: Any = extra.get("client_secret") or extra.get("client_certificate")
    if isinstance(credential, str) and credential.lstrip().startswith("{"):
        try:
            credential = json.loads(credential)
        except ValueError as exc:  # the message says where, never what: no key in it
            raise OAuthError(cfg.conn_id, f"the client credential is not valid JSON ({exc})",
                             "put client_certificate as a JSON object with private_key and "
                             "thumbprint, or the client secret as text") from None
    if not client_id or not credential or not (tenant or extra.get("authority")):
        raise OAuthError(cfg.conn_id, "incomplete Microsoft client credentials",
                         "set tenant_id, client_id and client_secret (or client_certificate) "
                         "in the extra")
    authority = str(extra.get("authority") or f"https://login.microsoftonline.com/{tenant}")
    try:
        app = msal.ConfidentialClientApplication(
            client_id, client_credential=credential, authority=authority,
            # A custom authority (sovereign cloud, the tests' loopback endpoint) is not known to
            # Microsoft's instance discovery: its own OpenID configuration is read instead.
            instance_discovery=False if extra.get("authority") else None,
            token_cache=msal.TokenCache(), timeout=_timeout(cfg))
        result = app.acquire_token_for_client(scopes=[cfg.scope])
    except ValueError as exc:  # discovery failed (bad tenant or authority), or a bad credential
        raise OAuthError(cfg.conn_id, f"MSAL refused the configuration ({str(exc)[:160]})",
                         "check tenant_id (or authority), and client_certificate's private_key "
                         "and thumbprint") from None
    except OSError as exc:  # requests' ConnectionError and friends
        raise TokenUnavailable(cfg.conn_id, f"Microsoft's token endpoint could not be reached "
                         f"({type(exc).__name__})", "check the network path; the run is "
                         "tried again") from None
    if "access_token" not in result:
        code = str(result.get("error") or "refused")
        # A refusal quoting what it was sent must not show the client secret (scrub).
        text = scrub(str(result.get("error_description")).splitlines()[0], credential
                     if isinstance(credential, str) else None) if result.get(
            "error_description") else ""
        aadsts = text.split(":", 1)[0].strip()
        fix = _MICROSOFT_FIXES.get(aadsts, "check the application's client credentials and its "
                                   "admin consent")
        raise OAuthError(cfg.conn_id, f"Microsoft refused the token request ({code}: {text})", fix)
    return str(result["access_token"]), time.time() + float(result.get("expires_in") or 3600)


def _static_token(cfg: OAuthConfig) -> tuple[str, float]:
    token = str(cfg.extra.get("access_token") or "")
    if not token:
        raise OAuthError(cfg.conn_id, "no access_token in the extra", "put a token there, or use "
                         "oauth2_provider google or microsoft")
    return token, float("inf")


_FETCH: dict[str, Callable[[OAuthConfig], tuple[str, float]]] = {
    "google": _google_token, "microsoft": _microsoft_token, "token": _static_token}


class TokenCache:
    """Access tokens per ``(conn_id, provider, user)`` in this process, each used until
    :data:`EARLY_REFRESH` seconds before it expires. Thread-safe; one fetch at a time per key.
    Holds tokens in memory only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the two dictionaries and the count, never a fetch
        self._tokens: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._fetching: dict[tuple[str, str, str], threading.Lock] = {}
        self.fetches = 0  # how many tokens were fetched (tests count refreshes with it)

    def _fresh(self, key: tuple[str, str, str]) -> str | None:
        with self._lock:
            held = self._tokens.get(key)
            return held[0] if held is not None and held[1] - EARLY_REFRESH > time.time() else None

    def get(self, cfg: OAuthConfig) -> str:
        """Return a cached token, or fetch one: the fetches of different keys at the same time
        (the preflight asks several relays at once), of one key one after the other.

        :raises OAuthError: the provider refused or could not be reached.
        """
        token = self._fresh(cfg.key)
        if token is not None:
            return token
        with self._lock:
            fetching = self._fetching.setdefault(cfg.key, threading.Lock())
        with fetching:
            token = self._fresh(cfg.key)  # fetched by the thread this one waited for
            if token is not None:
                return token
            token, expires = _FETCH[cfg.provider](cfg)
            _mask(token)
            with self._lock:
                self.fetches += 1
                self._tokens[cfg.key] = (token, expires)
            return token

    def invalidate(self, cfg: OAuthConfig) -> None:
        """Forget the token of ``cfg`` (the server refused it)."""
        with self._lock:
            self._tokens.pop(cfg.key, None)

    def clear(self) -> None:
        """Forget every token (tests; a process that was told its credentials changed)."""
        with self._lock:
            self._tokens.clear()


def _mask(token: str) -> None:
    """Register ``token`` with Airflow's secrets masker (task and supervisor logs show ``***``
    instead), a second line of defence: this module never logs a token in the first place."""
    try:
        from airflow.sdk.log import mask_secret

        mask_secret(token)
    except Exception:  # noqa: BLE001 - outside Airflow (the CLI) there is nothing to register
        pass


CACHE = TokenCache()
"""The process's token cache (a send task, an inbox task, the CLI)."""


class AuthRefused(Exception):
    """Raised by a ``login`` callable of :func:`with_token` when the server refused the token
    (SMTP 535, IMAP ``AUTHENTICATIONFAILED``); ``reply`` is the server's text."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


_SERVER_FIXES = {
    "google": (f"the server refused a fresh token: check that {{user}} is an active mailbox with "
               f"IMAP access on, and delegation for scope {GOOGLE_SCOPE} is granted"),
    "microsoft": ("the server refused a fresh token: register the application's service principal "
                  "in Exchange Online (New-ServicePrincipal) and give it FullAccess to {user} "
                  "(Add-MailboxPermission); for SMTP, SMTP AUTH must be on for the mailbox "
                  "(Set-CASMailbox -SmtpClientAuthenticationDisabled $false)"),
    "token": "the static access_token was refused (expired or revoked): put a new one in the "
             "extra",
}


def with_token(cfg: OAuthConfig, login: Callable[[str], T], protocol: str) -> T:
    """Log in with the cached token; when the server refuses it, fetch a fresh one and try once
    more (a token revoked or expired early). Both tokens stay inside this call.

    :param login: logs in with a token, raising :class:`AuthRefused` when the server refuses it.
    :param protocol: ``SMTP`` or ``IMAP`` (for the message).
    :raises OAuthError: no token could be had, or the fresh one was refused too.
    """
    for attempt in (1, 2):
        try:
            token = CACHE.get(cfg)
        except OAuthError as exc:
            raise note(exc) from None
        try:
            return login(token)
        except AuthRefused as exc:
            CACHE.invalidate(cfg)
            if attempt == 2 or cfg.provider == "token":
                raise note(OAuthError(
                    cfg.conn_id, f"{protocol} login of {_masked(cfg.user)} refused "
                    f"({scrub(exc.reply, token)})",
                    _SERVER_FIXES[cfg.provider].format(user=_masked(cfg.user)))) from None
    raise AssertionError("unreachable")


BASIC_FIX = ("check the connection's login and password (an app password where the provider "
             "requires one); Google Workspace and Microsoft 365 need OAuth 2.0: "
             "docs/howto/oauth-mailboxes.md")


def reply_text(reply: bytes | str) -> str:
    """A server reply as one line of text (at most 200 characters)."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    return " ".join(text.split())[:200]


def xoauth2(user: str, token: str) -> str:
    """The SASL XOAUTH2 initial response (before base64): ``user=…^Aauth=Bearer …^A^A``."""
    return f"user={user}\x01auth=Bearer {token}\x01\x01"


def _masked(address: str) -> str:
    from outreach.logutil import mask

    return mask(address) if "@" in address else address


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{8,}={0,2}")


def scrub(text: str | bytes, token: str | None) -> str:
    """A server's refusal as one line of at most 200 characters, without ``token`` in any form.

    Removed as itself and inside a base64 run (XOAUTH2, AUTH PLAIN/LOGIN, a server quoting it, whole
    or cut) that decodes to it or a ``Bearer`` credential; scrubbed before it is cut."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    if token:
        text = text.replace(token, "[secret]")

    def hide(match: re.Match[str]) -> str:
        run = match.group(0)
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4), validate=False)
        except ValueError:
            return run
        plain = decoded.decode("latin-1")
        if "Bearer" in plain or "auth=" in plain or (token and token[:16] in plain):
            return "[credential]"
        return run

    return _BASE64_RUN.sub(hide, text)[:200]


# --- the logins ------------------------------------------------------------------------------

def smtp_login(cfg: OAuthConfig) -> Any:
    """Return a connected ``smtplib.SMTP`` logged in with ``AUTH XOAUTH2`` (:func:`with_token`).

    The hook builds the client; EHLO and AUTH are done here, since the hook's own XOAUTH2 path sends
    AUTH before any EHLO without STARTTLS and smtplib takes the ``503`` for a success.

    :raises OAuthError: no token, or the server refused a fresh one.
    :raises Exception: whatever smtplib or the hook raises when it cannot connect."""
    import smtplib

    from airflow.providers.smtp.hooks.smtp import SmtpHook

    def login(token: str) -> Any:
        hook = SmtpHook(smtp_conn_id=cfg.conn_id, auth_type="oauth2")
        hook.smtp_connection = hook.get_connection(cfg.conn_id)
        client = hook._build_client()
        try:
            client.ehlo_or_helo_if_needed()
            if hook.smtp_starttls and not hook.use_ssl:
                client.starttls(context=hook._build_ssl_context())
                client.ehlo()
            if not client.has_extn("auth"):
                raise smtplib.SMTPNotSupportedError(
                    f"the server of {cfg.conn_id!r} offers no AUTH (STARTTLS first?)")
            try:
                code, resp = client.auth("XOAUTH2", lambda _=None: xoauth2(cfg.user, token))
            except smtplib.SMTPAuthenticationError as exc:
                code, resp = exc.smtp_code, exc.smtp_error
            if code != 235:
                text = resp.decode("utf-8", "replace") if isinstance(resp, bytes) else str(resp)
                raise AuthRefused(f"{code} {text}")
        except BaseException:
            client.close()
            raise
        return client

    return with_token(cfg, login, "SMTP")


def imap_login(cfg: OAuthConfig, connect: Callable[[], Any]) -> Any:
    """Return an IMAPClient logged in with ``AUTHENTICATE XOAUTH2`` (``oauth2_login``), the
    token from :data:`CACHE`, refreshed once on ``AUTHENTICATIONFAILED`` (a new connection for
    the second try).

    :param connect: returns a connected, not logged-in IMAPClient.
    :raises OAuthError: no token, or the server refused a fresh one.
    """
    import imaplib

    from imapclient.exceptions import LoginError

    def login(token: str) -> Any:
        client = connect()
        try:
            client.oauth2_login(cfg.user, token)
        except (LoginError, imaplib.IMAP4.error) as exc:
            try:
                client.shutdown()
            except Exception:  # noqa: BLE001 - the server may have hung up
                pass
            raise AuthRefused(scrub(str(exc), token)) from None
        return client

    return with_token(cfg, login, "IMAP")
