"""The one-click unsubscribe service (FastAPI): the https URL of every List-Unsubscribe header.

``POST /unsubscribe/{token}`` with ``List-Unsubscribe=One-Click`` suppresses the recipient and
answers 200, no redirect, cookie or login (RFC 8058 §3.2); ``GET`` only shows a button (link
scanners). Bad tokens get 400/410/404, outages 503, big bodies 413 (:class:`BodyLimit`), never a
500. Also serves the ESP webhooks (:mod:`outreach.web.esp_webhooks`). Answers and set-up (the
public URL includes the mount prefix): docs/howto/unsubscribe-service.md."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from outreach import db
from outreach.logutil import log, mask
from outreach.settings import EspSettings
from outreach.store import emails as emails_store
from outreach.suppression import is_suppressed
from outreach.tokens import MAX_AGE_SECONDS, TokenError, read_token
from outreach.web.esp_webhooks import MAX_BODY as ESP_MAX_BODY
from outreach.web.esp_webhooks import add_routes as add_esp_routes
from outreach.web.esp_webhooks import fetch_sns

ONE_CLICK_FIELD, ONE_CLICK_VALUE = "List-Unsubscribe", "One-Click"
MAX_BODY_BYTES = 4096
"""Bytes a request body may have: ``List-Unsubscribe=One-Click`` is 26, a multipart form of it
from a mail provider a few hundred (RFC 8058 §3.1); anything larger is not a one-click request."""
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_MAX_TOKEN = 512

# No caching (a later state must show), no referrer (the URL carries the token), no indexing,
# nothing loaded from elsewhere, and the button may only post back here.
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex, nofollow",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
}


class BodyLimit:
    """ASGI middleware: answer 413 to a body over ``limit`` bytes, never reading more than ``limit`` +
    one chunk (a declared Content-Length over it is refused unread).

    :param app: the ASGI app to protect.
    :param limit: bytes, default :data:`MAX_BODY_BYTES`.
    :param larger: ``{path prefix: bytes}`` for larger bodies (``/esp/``), below ``root_path``."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES,
                 larger: dict[str, int] | None = None) -> None:
        self.app, self.default, self.larger = app, limit, dict(larger or {})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve one ASGI connection scope (see the class docstring)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, root = scope.get("path", ""), scope.get("root_path", "")
        path = path[len(root):] if root and path.startswith(root) else path
        limit = next((n for prefix, n in self.larger.items() if path.startswith(prefix)),
                     self.default)
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.strip().isdigit() and int(declared) > limit:
            await self._refuse(scope, send, limit)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > limit:
                await self._refuse(scope, send, limit)
                return
        body, sent = b"".join(chunks), False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Any, send: Any, limit: int) -> None:
        what = ("An unsubscribe request" if limit == self.default else "A webhook request")
        response = _page(413, "Request too large",
                         f"<p>{what} is at most {limit} bytes"
                         + (f" ({ONE_CLICK_FIELD}={ONE_CLICK_VALUE}, RFC 8058)" if limit == self.default
                            else "") + ".</p>")
        response.headers["Connection"] = "close"
        await response(scope, _nothing, send)


async def _nothing() -> Any:
    return {"type": "http.disconnect"}


class ServiceUnavailable(RuntimeError):
    """The service cannot answer now: no secret configured, or the database is unreachable."""


class _Lazy:
    """A value given as-is or as a zero-argument callable, resolved on first use (per process)
    and kept; a failed resolution is retried on the next request."""

    def __init__(self, value: str | Callable[[], str], what: str) -> None:
        self._value = value
        self._what = what
        self._lock = threading.Lock()
        self._resolved: str | None = value if isinstance(value, str) else None

    def get(self) -> str:
        if self._resolved is None:
            with self._lock:
                if self._resolved is None:
                    try:
                        resolved = self._value()  # type: ignore[operator]
                    except Exception as exc:  # noqa: BLE001 - config errors of any kind
                        raise ServiceUnavailable(f"{self._what}: {type(exc).__name__}: {exc}") from None
                    if not resolved:
                        raise ServiceUnavailable(f"{self._what} is empty")
                    self._resolved = resolved
        return self._resolved


def _page(status: int, title: str, body_html: str) -> HTMLResponse:
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem;
color:#222}}button{{font-size:1rem;padding:.6rem 1.2rem;cursor:pointer}}</style></head>
<body><h1>{html.escape(title)}</h1>
{body_html}
</body></html>
"""
    return HTMLResponse(doc, status_code=status, headers=_HEADERS)


def _token_error_page(exc: TokenError) -> HTMLResponse:
    if exc.expired:
        return _page(410, "This unsubscribe link has expired",
                     "<p>The link is too old to use. Reply to the email and ask to be removed, "
                     "or use the unsubscribe link of a more recent email.</p>")
    return _page(400, "This unsubscribe link is not valid",
                 "<p>The link is incomplete or was changed. Please use the link exactly as it "
                 "appears in the email.</p>")


def _unknown_page() -> HTMLResponse:
    return _page(404, "Unknown unsubscribe link",
                 "<p>We could not find the email this link belongs to.</p>")


def _unavailable_page(exc: Exception) -> HTMLResponse:
    log.error("unsubscribe service unavailable: %s", exc)
    return _page(503, "Please try again later",
                 "<p>We could not process your request right now. Please try again in a few "
                 "minutes; nothing was changed.</p>")


async def _is_one_click(request: Request) -> bool:
    """Whether the body is ``List-Unsubscribe=One-Click`` (RFC 8058 §3.2), in either form encoding
    (or, leniently, as the bare body with another content type)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in _FORM_TYPES:
        try:
            form = await request.form()
        except Exception:  # noqa: BLE001 - malformed multipart/urlencoded bodies of any kind
            return False
        value = form.get(ONE_CLICK_FIELD)
        return isinstance(value, str) and value.strip() == ONE_CLICK_VALUE
    body = await request.body()
    return body.strip() == f"{ONE_CLICK_FIELD}={ONE_CLICK_VALUE}".encode()


def create_app(database_url: str | Callable[[], str], secret: str | Callable[[], str], *,
               max_age: int = MAX_AGE_SECONDS,
               esp_settings: Callable[[], EspSettings] = EspSettings,
               esp_fetch: Callable[[str], bytes] = fetch_sns) -> FastAPI:
    """Build the unsubscribe app; nothing is read or connected until the first request.

    :param database_url: the outreach database URL, or a callable returning it.
    :param secret: the HMAC secret of unsubscribe tokens (the sender's), or a callable.
    :param max_age: seconds a token stays valid (default :data:`outreach.tokens.MAX_AGE_SECONDS`).
    :param esp_settings: builds the ESP webhooks' keys (:class:`outreach.settings.EspSettings`).
    :param esp_fetch: fetches SNS certificates and subscription URLs.
    :returns: an app serving only ``/unsubscribe/{token}`` (GET, HEAD, POST) and ``/esp/…``."""
    url, key = _Lazy(database_url, "outreach database URL"), _Lazy(secret, "unsubscribe secret")
    app = FastAPI(title="outreach unsubscribe", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, larger={"/esp/": ESP_MAX_BODY})

    def email_id_of(token: str) -> int:
        if len(token) > _MAX_TOKEN:
            raise TokenError("this unsubscribe link is not valid")
        return read_token(key.get(), token, max_age=max_age)

    def lookup(email_id: int) -> dict[str, Any] | None:
        with db.connect(url.get(), autocommit=True) as conn:
            target = emails_store.email_unsubscribe_target(conn, email_id=email_id)
            if target is None:
                return None
            return {**asdict(target), "suppressed": is_suppressed(conn, target.email)}

    def unsubscribe(email_id: int):
        from outreach.suppression import unsubscribe_email

        with db.transaction(url.get()) as conn:
            return unsubscribe_email(conn, email_id)

    async def guarded(work: Callable[[], Any]) -> Any:
        """Run blocking work in the thread pool; database trouble becomes ServiceUnavailable."""
        try:
            return await run_in_threadpool(work)
        except db.OutreachDBError as exc:
            raise ServiceUnavailable(str(exc)) from None
        except psycopg.Error as exc:
            raise ServiceUnavailable(f"database: {type(exc).__name__}") from None

    @app.api_route("/unsubscribe/{token}", methods=["GET", "HEAD"], response_class=HTMLResponse)
    async def confirm_page(token: str) -> HTMLResponse:
        """Show the unsubscribe button; never unsubscribes by itself."""
        try:
            email_id = await guarded(lambda: email_id_of(token))
            row = await guarded(lambda: lookup(email_id))
        except TokenError as exc:
            return _token_error_page(exc)
        except ServiceUnavailable as exc:
            return _unavailable_page(exc)
        if row is None:
            return _unknown_page()
        who = html.escape(mask(row["email"]))
        if row["suppressed"]:
            return _page(200, "You are unsubscribed",
                         f"<p>{who} will not receive any more emails from us.</p>")
        return _page(200, "Unsubscribe",
                     f"<p>Stop all further emails to {who}?</p>"
                     f'<form method="post"><input type="hidden" name="{ONE_CLICK_FIELD}" '
                     f'value="{ONE_CLICK_VALUE}"><button type="submit">Unsubscribe</button></form>')

    @app.post("/unsubscribe/{token}", response_class=HTMLResponse)
    async def one_click(token: str, request: Request) -> HTMLResponse:
        """RFC 8058 one-click: suppress, cancel queued steps, answer 200."""
        try:
            email_id = await guarded(lambda: email_id_of(token))
        except TokenError as exc:
            return _token_error_page(exc)
        except ServiceUnavailable as exc:
            return _unavailable_page(exc)
        if not await _is_one_click(request):
            return _page(400, "Unsubscribe request not understood",
                         f"<p>The request must carry {ONE_CLICK_FIELD}={ONE_CLICK_VALUE} "
                         "(RFC 8058). Use the button on this page.</p>")
        try:
            result = await guarded(lambda: unsubscribe(email_id))
        except ServiceUnavailable as exc:
            return _unavailable_page(exc)
        if result is None:
            return _unknown_page()
        log.info("one-click unsubscribe: email %s (%s) %s; cancelled %s queued email(s)",
                 email_id, mask(result.address),
                 "suppressed" if result.added else "was already suppressed", result.cancelled)
        return _page(200, "You are unsubscribed",
                     f"<p>{html.escape(mask(result.address))} will not receive any more emails "
                     "from us.</p>")

    add_esp_routes(app, url.get, settings=esp_settings, fetch=esp_fetch)
    return app
