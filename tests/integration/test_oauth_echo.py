"""An SMTP server that echoes the client's XOAUTH2 or AUTH PLAIN initial response in its refusal
(base64, as it came over the wire): the token or password must not reach the refusal's text,
which becomes the exception Airflow shows, the rows' last_error, the login alert's body and
``outreach mailbox check``'s output. Likewise a token endpoint that quotes the client secret."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from aiosmtpd.smtp import AuthResult

from outreach import oauth
from outreach.dev.devsmtp import free_port
from support.oauthserver import IdentityProvider, _PlainAuthController

PASSWORD = "hunter2-correct-horse"
TOKEN = "ya29.static-token-that-must-stay-secret-0123456789"


class _Echo:
    """Refuses every XOAUTH2 login, quoting what the client sent."""

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        return "250 OK"

    async def auth_XOAUTH2(self, server: Any, args: list[str]) -> AuthResult:
        blob = args[1] if len(args) > 1 else ""
        return AuthResult(success=False, handled=False,
                          message=f"535 5.7.8 Invalid credentials: {blob}")

    async def auth_PLAIN(self, server: Any, args: list[str]) -> AuthResult:
        return await self.auth_XOAUTH2(server, args)


@pytest.fixture
def echo_server():
    controller = _PlainAuthController(_Echo(), hostname="127.0.0.1", port=free_port(),
                                      auth_required=True, auth_require_tls=False,
                                      auth_exclude_mechanism=["LOGIN"])
    controller.start()
    yield controller
    controller.stop()


def test_an_echoed_xoauth2_response_is_not_in_the_refusal(echo_server, monkeypatch):
    from outreach.airflow.connections import smtp_connector

    oauth.CACHE.clear()
    login = "anna@example.com"
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_ECHO", json.dumps({
        "conn_type": "smtp", "host": echo_server.hostname, "port": echo_server.port,
        "login": login, "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 5,
                                  "retry_limit": 0, "auth_type": "oauth2",
                                  "oauth2_provider": "token", "access_token": TOKEN}}))
    with pytest.raises(oauth.LoginRefused) as refused:
        smtp_connector("outreach_smtp_echo")
    text = str(refused.value)
    wire = base64.b64encode(oauth.xoauth2(login, TOKEN).encode()).decode()
    assert "Invalid credentials" in text, text
    assert TOKEN not in text and wire not in text and wire[:40] not in text, text


def test_an_echoed_auth_plain_response_is_not_in_the_refusal(echo_server, monkeypatch):
    from outreach.airflow.connections import smtp_connector

    login = "anna@example.com"
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_SMTP_ECHO", json.dumps({
        "conn_type": "smtp", "host": echo_server.hostname, "port": echo_server.port,
        "login": login, "password": PASSWORD,
        "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 5, "retry_limit": 0}}))
    with pytest.raises(oauth.LoginRefused) as refused:
        smtp_connector("outreach_smtp_echo")
    text = str(refused.value)
    wire = base64.b64encode(f"\0{login}\0{PASSWORD}".encode()).decode()
    assert "Invalid credentials" in text, text
    assert PASSWORD not in text and wire not in text and wire[:20] not in text, text


class _EchoingEntra(IdentityProvider):
    """Entra ID that quotes the client secret it was sent in its refusal."""

    def _microsoft_token(self, tenant: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        return 401, {"error": "invalid_client", "error_description":
                     f"AADSTS7000215: Invalid client secret provided: {form.get('client_secret')}"}


def test_a_token_endpoint_quoting_the_client_secret_does_not_put_it_in_the_refusal(
        tmp_path, monkeypatch):
    idp = _EchoingEntra(tmp_path).start()
    try:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(idp.cert))
        oauth.CACHE.clear()
        extra = idp.microsoft_app("anna@example.com")
        cfg = oauth.config("outreach_smtp_anna", "anna@example.com", extra)
        with pytest.raises(oauth.OAuthError) as refused:
            oauth.CACHE.get(cfg)
    finally:
        idp.stop()
    text = str(refused.value)
    assert "AADSTS7000215" in text and "client secret is wrong" in text, text
    assert extra["client_secret"] not in text, text
