"""A local identity provider and an XOAUTH2 SMTP server for the OAuth 2.0 tests.

:class:`IdentityProvider` plays both roles on loopback, over HTTPS with a certificate made here
(MSAL accepts only ``https`` authorities; ``REQUESTS_CA_BUNDLE`` makes requests trust it):

- Google's token endpoint (``/google/token``): the JWT bearer grant (RFC 7523) of a service
  account, its assertion verified with the public half of a key generated in the test
  (:meth:`google_key` returns the JSON key, its ``token_uri`` pointing here), the scope
  ``https://mail.google.com/`` and domain-wide delegation checked; errors as Google words them
  (``invalid_grant`` "Invalid JWT Signature.", ``unauthorized_client``).
- Microsoft's Entra ID (``/<tenant>/v2.0/.well-known/openid-configuration`` and
  ``/<tenant>/oauth2/v2.0/token``): the client credentials grant; errors with AADSTS codes.

Issued tokens are random; the RFC 7662 introspection endpoint (plain HTTP, for Dovecot's oauth2
passdb) and :meth:`valid` (for the SMTP server) accept only those, while active and unexpired.
:class:`XOAuth2Sink` is aiosmtpd with an ``auth_XOAUTH2`` mechanism that requires AUTH and
stores accepted mail in a Maildir.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import secrets
import ssl
import threading
import time
import urllib.parse
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from outreach.dev.devsmtp import free_port, read_maildir
from outreach.oauth import GOOGLE_SCOPE, MICROSOFT_SCOPE

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def loopback_certificate(directory: Path) -> tuple[Path, Path]:
    """Write a self-signed certificate for 127.0.0.1 and its key; return (cert, key) paths."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "idp-cert.pem", directory / "idp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_text(_pem(key))
    return cert_path, key_path


class IdentityProvider:
    """Google's and Microsoft's token endpoints and an introspection endpoint on loopback.

    ``grants`` lists every token issued (``(role, who)``); ``refusals`` every grant refused
    (``(role, error)``); ``issued`` every token (the tests search logs and rows for them).
    """

    def __init__(self, directory: Path) -> None:
        self.cert, self._key = loopback_certificate(directory)
        self.port, self.introspection_port = free_port(), free_port()
        self.base = f"https://127.0.0.1:{self.port}"
        self.introspection_url = f"http://127.0.0.1:{self.introspection_port}/introspect"
        self.token_lifetime = 3600
        self._lock = threading.Lock()
        self._google: dict[str, dict[str, Any]] = {}     # client_email -> public key, delegation
        self._apps: dict[tuple[str, str], dict[str, Any]] = {}  # (tenant, client_id) -> secret
        self._tokens: dict[str, dict[str, Any]] = {}     # token -> user, expires, active
        self.grants: list[tuple[str, str]] = []
        self.refusals: list[tuple[str, str]] = []
        self.issued: list[str] = []
        self.introspections = 0
        self._servers: list[ThreadingHTTPServer] = []

    # -- set-up --------------------------------------------------------------------------------
    def google_key(self, client_email: str = "outreach-mail@proj.iam.gserviceaccount.com",
                   *, delegated: bool = True) -> dict[str, Any]:
        """Create a service account (its RSA key generated here); return its JSON key."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        client_id = str(100000000000000000000 + len(self._google))
        self._google[client_email] = {"public": key.public_key(), "client_id": client_id,
                                      "scopes": {GOOGLE_SCOPE} if delegated else set()}
        return {"type": "service_account", "project_id": "proj", "private_key_id": secrets.token_hex(20),
                "private_key": _pem(key), "client_email": client_email, "client_id": client_id,
                "token_uri": f"{self.base}/google/token"}

    def delete_google_key(self, client_email: str) -> None:
        """The key is deleted in IAM: assertions signed with it no longer verify."""
        self._google[client_email]["public"] = rsa.generate_private_key(
            public_exponent=65537, key_size=2048).public_key()

    def revoke_delegation(self, client_email: str) -> None:
        """An admin removes the domain-wide delegation of the service account."""
        self._google[client_email]["scopes"] = set()

    def microsoft_app(self, mailbox: str, tenant: str = "contoso-tenant-id",
                      client_id: str = "11111111-2222-3333-4444-555555555555", *,
                      certificate: bool = False) -> dict[str, Any]:
        """Register an Entra application allowed to use ``mailbox``, with a client secret or
        (``certificate``) a certificate generated here; return the connection extra of the
        microsoft provider (its ``authority`` pointing here)."""
        secret = secrets.token_urlsafe(24)
        app: dict[str, Any] = {"secret": secret, "mailbox": mailbox}
        extra: dict[str, Any] = {"auth_type": "oauth2", "oauth2_provider": "microsoft",
                                 "tenant_id": tenant, "client_id": client_id,
                                 "authority": f"{self.base}/{tenant}"}
        if certificate:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, client_id)])
            now = dt.datetime.now(dt.UTC)
            cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                    .public_key(key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - dt.timedelta(minutes=5))
                    .not_valid_after(now + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
            app["public"], app["x5t"] = key.public_key(), cert.fingerprint(hashes.SHA1())
            extra["client_certificate"] = {"private_key": _pem(key),
                                           "thumbprint": app["x5t"].hex()}
        else:
            extra["client_secret"] = secret
        self._apps[(tenant, client_id)] = app
        return extra

    def rotate_secret(self, tenant: str, client_id: str) -> None:
        """The app's secret is replaced: the one the connection holds no longer works."""
        self._apps[(tenant, client_id)]["secret"] = secrets.token_urlsafe(24)

    def expire_all(self) -> None:
        """Every token issued so far expires now (the client's cache still believes in them)."""
        with self._lock:
            for t in self._tokens.values():
                t["expires"] = 0

    def valid(self, token: str, user: str) -> bool:
        """Whether ``token`` is an active, unexpired token issued here for ``user``."""
        with self._lock:
            t = self._tokens.get(token)
            return bool(t and t["expires"] > time.time() and t["user"].lower() == user.lower())

    def _issue(self, role: str, user: str) -> dict[str, Any]:
        token = f"ya29.{secrets.token_urlsafe(32)}" if role == "google" else secrets.token_urlsafe(48)
        with self._lock:
            self._tokens[token] = {"user": user, "expires": time.time() + self.token_lifetime}
            self.issued.append(token)
            self.grants.append((role, user))
        return {"access_token": token, "token_type": "Bearer", "expires_in": self.token_lifetime}

    # -- the endpoints -------------------------------------------------------------------------
    def _google_token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("grant_type") != JWT_BEARER:
            return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}
        assertion = form.get("assertion", "")
        try:
            iss = jwt.decode(assertion, options={"verify_signature": False})["iss"]
            account = self._google[iss]
            claims = jwt.decode(assertion, account["public"], algorithms=["RS256"],
                                # google-auth's audience is Google's own token URI,
                                # wherever token_uri sends the grant (as Google requires).
                                audience=["https://oauth2.googleapis.com/token",
                                          f"{self.base}/google/token"])
        except (KeyError, jwt.PyJWTError):
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        scopes = set(str(claims.get("scope", "")).split())
        if not claims.get("sub") or not scopes or not scopes <= account["scopes"]:
            return 401, {"error": "unauthorized_client", "error_description":
                         "Client is unauthorized to retrieve access tokens using this method, or "
                         "client not authorized for any of the scopes requested."}
        return 200, self._issue("google", claims["sub"])

    def _microsoft_token(self, tenant: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        app = self._apps.get((tenant, form.get("client_id", "")))
        if app is None:
            return 400, {"error": "unauthorized_client", "error_description":
                         f"AADSTS700016: Application with identifier '{form.get('client_id')}' "
                         "was not found in the directory."}
        endpoint = f"{self.base}/{tenant}/oauth2/v2.0/token"
        if form.get("client_assertion") and "public" in app:  # a certificate credential
            try:
                header = jwt.get_unverified_header(form["client_assertion"])
                claims = jwt.decode(form["client_assertion"], app["public"],
                                    algorithms=["RS256", "PS256"], audience=endpoint)
                x5t = base64.urlsafe_b64decode(header["x5t"] + "==")
                ok = x5t == app["x5t"] and claims["iss"] == claims["sub"] == form["client_id"]
            except (KeyError, ValueError, jwt.PyJWTError):
                ok = False
            if not ok:
                return 401, {"error": "invalid_client", "error_description":
                             "AADSTS700027: The certificate with identifier used to sign the "
                             "client assertion is not registered on application."}
        elif form.get("grant_type") != "client_credentials" or not secrets.compare_digest(
                form.get("client_secret", ""), app["secret"]):
            return 401, {"error": "invalid_client", "error_description":
                         "AADSTS7000215: Invalid client secret provided. Ensure the secret being "
                         "sent in the request is the client secret value, not the client secret ID."}
        if form.get("scope", "").split() != [MICROSOFT_SCOPE]:
            return 400, {"error": "invalid_scope", "error_description":
                         f"AADSTS1002012: The provided value for scope {form.get('scope')} is not valid."}
        return 200, self._issue("microsoft", app["mailbox"])

    def _introspect(self, form: dict[str, str]) -> dict[str, Any]:
        with self._lock:
            self.introspections += 1
            t = self._tokens.get(form.get("token", ""))
            if not t or t["expires"] <= time.time():
                return {"active": False}
            return {"active": True, "username": t["user"]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: tokens are in bodies only
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = urllib.parse.urlparse(self.path).path.strip("/").split("/")
                if len(parts) == 4 and parts[1:] == ["v2.0", ".well-known", "openid-configuration"]:
                    t = f"{idp.base}/{parts[0]}"
                    return self._reply(200, {
                        "token_endpoint": f"{t}/oauth2/v2.0/token",
                        "authorization_endpoint": f"{t}/oauth2/v2.0/authorize",
                        "issuer": f"{t}/v2.0", "device_authorization_endpoint":
                        f"{t}/oauth2/v2.0/devicecode"})
                self._reply(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                path = urllib.parse.urlparse(self.path).path.strip("/").split("/")
                if path == ["introspect"]:
                    return self._reply(200, idp._introspect(form))
                if path == ["google", "token"]:
                    status, body = idp._google_token(form)
                elif len(path) == 4 and path[1:] == ["oauth2", "v2.0", "token"]:
                    status, body = idp._microsoft_token(path[0], form)
                else:
                    status, body = 404, {"error": "not_found"}
                if status != 200:
                    idp.refusals.append((path[0], body["error"]))
                self._reply(status, body)

        return Handler

    def start(self) -> IdentityProvider:
        tls = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self._key)
        tls.socket = context.wrap_socket(tls.socket, server_side=True)
        plain = ThreadingHTTPServer(("127.0.0.1", self.introspection_port), self._handler())
        for server in (tls, plain):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()


class _XOAuth2Maildir(Mailbox):
    """aiosmtpd's Maildir handler plus an ``XOAUTH2`` AUTH mechanism checked against the IdP."""

    def __init__(self, maildir: Path, idp: IdentityProvider) -> None:
        super().__init__(maildir)
        self.idp = idp
        self.accepted: list[str] = []   # users logged in
        self.refused: list[str] = []    # users refused

    async def auth_XOAUTH2(self, server: Any, args: list[str]) -> AuthResult:
        blob = args[1] if len(args) > 1 else None
        if blob is None:
            got = await server.challenge_auth("", encode_to_b64=False)
            blob = got.decode() if isinstance(got, bytes) else ""
        try:
            fields = dict(p.split("=", 1) for p in base64.b64decode(blob).decode().split("\x01") if p)
            user, token = fields["user"], fields["auth"].removeprefix("Bearer ")
        except Exception:  # noqa: BLE001 - a malformed initial response
            return AuthResult(success=False, handled=False, message="501 5.5.2 Cannot decode response")
        if self.idp.valid(token, user):
            self.accepted.append(user)
            return AuthResult(success=True, auth_data=user)
        self.refused.append(user)
        return AuthResult(success=False, handled=False,
                          message="535 5.7.8 Username and Password not accepted")


class _PlainAuthController(Controller):
    """aiosmtpd's controller, quiet about AUTH without TLS: the sink is loopback plain text on
    purpose (aiosmtpd warns, and the test run turns warnings into errors)."""

    def factory(self):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS",
                                    UserWarning)
            return super().factory()


class XOAuth2Sink:
    """A loopback SMTP server that requires ``AUTH XOAUTH2`` with a token of ``idp`` and stores
    accepted mail in ``maildir``."""

    def __init__(self, maildir: Path, idp: IdentityProvider) -> None:
        self.maildir = Path(maildir)
        import mailbox

        mailbox.Maildir(str(self.maildir), create=True)
        self.handler = _XOAuth2Maildir(self.maildir, idp)
        self.host, self.port = "127.0.0.1", free_port()
        self._controller = _PlainAuthController(
            self.handler, hostname=self.host, port=self.port, auth_required=True,
            auth_require_tls=False, enable_SMTPUTF8=True)

    def start(self) -> XOAuth2Sink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def messages(self) -> list:
        return read_maildir(self.maildir)

    def connection_json(self, login: str, extra: dict[str, Any]) -> str:
        """An Airflow SMTP connection to this server logging in as ``login`` with ``extra``
        (the OAuth settings) on top of plain text, no hook retries, 5 s timeout."""
        return json.dumps({"conn_type": "smtp", "host": self.host, "port": self.port,
                           "login": login, "extra": {"disable_ssl": True, "disable_tls": True,
                                                     "timeout": 5, "retry_limit": 0, **extra}})
