"""A token endpoint that accepts the connection and never answers: the token request gives up
after the connection's timeout (extra ``timeout``, seconds) and is transient (TokenUnavailable:
the run is retried, no login alert), instead of holding the send or inbox task, its claimed rows
and the process's token cache forever (MSAL's requests have no timeout of their own). And a
credential that cannot even be parsed is a refused login, not an error the run retries."""

from __future__ import annotations

import threading
import time

import pytest

from outreach import oauth
from support.oauthserver import IdentityProvider
from support.silent import silent_listener


@pytest.fixture
def silent_endpoint():
    """A TCP port on loopback that accepts connections and never sends a byte."""
    with silent_listener() as (port, _):
        yield f"https://127.0.0.1:{port}"


def _fetch_in(seconds: float, cfg: oauth.OAuthConfig) -> tuple[BaseException | None, float]:
    """Fetch a token in a thread; return what it raised and how long it took (the thread is
    left behind, a daemon, when it is still waiting after ``seconds``)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            oauth.CACHE.get(cfg)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"the token request was still waiting after {seconds} s"
    return outcome[0], time.monotonic() - started


def test_a_silent_microsoft_token_endpoint_times_out(silent_endpoint):
    oauth.CACHE.clear()
    extra = {"auth_type": "oauth2", "oauth2_provider": "microsoft", "tenant_id": "t",
             "client_id": "app", "client_secret": "s3cret-value",
             "authority": f"{silent_endpoint}/t", "timeout": 1}
    cfg = oauth.config("outreach_smtp_anna", "anna@example.com", extra)
    raised, took = _fetch_in(30, cfg)
    assert isinstance(raised, oauth.TokenUnavailable), raised
    assert "s3cret-value" not in str(raised)
    assert took < 20


def test_a_silent_google_token_endpoint_times_out(silent_endpoint, tmp_path):
    oauth.CACHE.clear()
    key = IdentityProvider(tmp_path).google_key()
    key["token_uri"] = f"{silent_endpoint}/google/token"
    extra = {"auth_type": "oauth2", "oauth2_provider": "google", "keyfile_dict": key,
             "timeout": 1}
    cfg = oauth.config("outreach_smtp_anna", "anna@example.com", extra)
    raised, took = _fetch_in(60, cfg)
    assert isinstance(raised, oauth.TokenUnavailable), raised
    assert took < 20


def test_a_client_certificate_that_is_not_json_is_a_refused_login_naming_no_key():
    """A configuration mistake a person must fix (no retry can): LoginRefused, not a raw
    JSONDecodeError that the transport would take for an unreachable relay and retry."""
    oauth.CACHE.clear()
    pem = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n"
    extra = {"auth_type": "oauth2", "oauth2_provider": "microsoft", "tenant_id": "t",
             "client_id": "app", "client_certificate": '{"private_key": "' + pem + '", '}
    cfg = oauth.config("outreach_smtp_anna", "anna@example.com", extra)
    with pytest.raises(oauth.OAuthError) as refused:
        oauth.CACHE.get(cfg)
    assert "not valid JSON" in str(refused.value)
    assert "MIIEvQ" not in str(refused.value)
