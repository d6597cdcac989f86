"""The ESP webhook endpoints (``POST /esp/ses``, ``/esp/sendgrid``, ``/esp/mailgun``,
``/esp/postmark[/{secret}]``), served by :mod:`outreach.web.unsubscribe_app`; the rules live in
:mod:`outreach.esp`. Answers (200, 401, 400, 404, 413 over :data:`MAX_BODY`, 503):
docs/howto/esp-webhooks.md#answers."""

from __future__ import annotations

import base64
import functools
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from outreach import db, esp
from outreach.logutil import log
from outreach.settings import EspSettings, SettingsError

MAX_BODY = 1024 * 1024
"""Bytes a webhook body may have (SendGrid batches events; each is well under 1 KB); the app's
:class:`outreach.web.unsubscribe_app.BodyLimit` answers 413 above it."""


def fetch_sns(url: str) -> bytes:
    """GET ``url`` (an SNS certificate or SubscribeURL, checked by :func:`outreach.esp.sns_host_ok`
    before): at most 64 KB, within 10 seconds."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read(65536))


def _answer(status: int, **body: Any) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def add_routes(app: FastAPI, database_url: Callable[[], str], *,
               settings: Callable[[], EspSettings] = EspSettings,
               fetch: Callable[[str], bytes] = fetch_sns) -> None:
    """Add the ``/esp/…`` endpoints to ``app``.

    :param database_url: a callable returning the outreach database URL (resolved per request).
    :param settings: builds the providers' keys, read at each request (no restart after a change).
    :param fetch: ``url -> bytes`` for SNS certificates and confirmations (SNS hosts only)."""
    certificate = functools.lru_cache(maxsize=16)(fetch)  # SNS signs with few certificates

    def apply(provider: str, events: list[esp.EspEvent], token: str | None = None) -> dict[str, int]:
        from outreach.store import esp_events as store

        with db.transaction(database_url()) as conn:
            if token is not None and not store.esp_event_token_use(conn, provider=provider,
                                                                   token=token):
                raise esp.WebhookAuthError("the signature token was used before (a replay)")
            applied = 0
            for event in events:
                effect = esp.apply_event(conn, event)
                if effect is not None:
                    applied += 1
                    log.info("esp event %s %s: %s", provider, esp.describe(event), effect)
        return {"events": len(events), "applied": applied, "duplicates": len(events) - applied}

    async def handle(provider: str, request: Request,
                     work: Callable[[EspSettings, bytes], tuple[list[esp.EspEvent], str | None]]
                     ) -> JSONResponse:
        body = await request.body()  # at most MAX_BODY: the app's BodyLimit answered 413 above it
        try:
            config = settings()
            events, token = await run_in_threadpool(work, config, body)
            counts = await run_in_threadpool(apply, provider, events, token)
        except LookupError as exc:
            return _answer(404, detail=str(exc))
        except esp.WebhookAuthError as exc:
            log.warning("esp webhook %s refused (401): %s", provider, exc)
            return _answer(401, detail=str(exc))
        except esp.WebhookPayloadError as exc:
            return _answer(400, detail=str(exc))
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            # A body shaped like nothing the provider sends (a list where text belongs, JSON
            # nested past the parser's depth): refused, never a 500 with a traceback.
            log.warning("esp webhook %s refused (400): %s", provider, type(exc).__name__)
            return _answer(400, detail="the body is not what the provider sends")
        except SettingsError as exc:
            log.error("esp webhook %s: misconfigured (503): %s", provider, exc)
            return _answer(503, detail="the webhook is misconfigured; see the service's log")
        except (db.OutreachDBError, psycopg.Error, OSError) as exc:
            log.error("esp webhook %s: database unavailable (503): %s", provider, type(exc).__name__)
            return _answer(503, detail="try again later")
        log.info("esp webhook %s: events=%s applied=%s duplicates=%s", provider,
                 counts["events"], counts["applied"], counts["duplicates"])
        return _answer(200, **counts)

    def need(value: Any, variable: str, provider: str) -> Any:
        if not value:
            raise LookupError(f"{provider} webhooks are not configured: set {variable}")
        return value

    def parse_json(body: bytes) -> Any:
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise esp.WebhookPayloadError("the body is not JSON") from None

    @app.post("/esp/ses")
    async def ses(request: Request) -> JSONResponse:
        """Amazon SES through SNS."""
        def work(config: EspSettings, body: bytes) -> tuple[list[esp.EspEvent], str | None]:
            topics = need(config.ses_topic_arns, "OUTREACH_SES_TOPIC_ARNS", "SES")
            try:
                message = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise esp.WebhookAuthError("not an SNS message (no JSON)") from None
            if not isinstance(message, dict):
                raise esp.WebhookAuthError("not an SNS message")
            esp.verify_sns(message, topics, certificate)
            if message["Type"] == "SubscriptionConfirmation":
                url = str(message.get("SubscribeURL", ""))
                if not esp.sns_host_ok(url):
                    raise esp.WebhookAuthError("SubscribeURL is not on an SNS host")
                fetch(url)
                log.info("esp webhook ses: subscription to %s confirmed", message["TopicArn"])
                return [], None
            if message["Type"] != "Notification":
                return [], None
            return esp.parse_ses(message), None
        return await handle("ses", request, work)

    @app.post("/esp/sendgrid")
    async def sendgrid(request: Request) -> JSONResponse:
        """SendGrid's Signed Event Webhook."""
        def work(config: EspSettings, body: bytes) -> tuple[list[esp.EspEvent], str | None]:
            key = need(config.sendgrid_webhook_public_key, "OUTREACH_SENDGRID_WEBHOOK_PUBLIC_KEY",
                       "SendGrid")
            esp.verify_sendgrid(key, request.headers.get("x-twilio-email-event-webhook-signature"),
                                request.headers.get("x-twilio-email-event-webhook-timestamp"), body,
                                window=config.esp_replay_window_seconds)
            return esp.parse_sendgrid(parse_json(body)), None
        return await handle("sendgrid", request, work)

    @app.post("/esp/mailgun")
    async def mailgun(request: Request) -> JSONResponse:
        """Mailgun webhooks (JSON)."""
        def work(config: EspSettings, body: bytes) -> tuple[list[esp.EspEvent], str | None]:
            key = need(config.mailgun_signing_key, "OUTREACH_MAILGUN_SIGNING_KEY", "Mailgun")
            try:
                payload = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise esp.WebhookAuthError("missing Mailgun signature (no JSON)") from None
            token = esp.verify_mailgun(key, payload, window=config.esp_replay_window_seconds)
            return esp.parse_mailgun(payload), token
        return await handle("mailgun", request, work)

    def postmark_work(presented: str | None) -> Callable[..., tuple[list[esp.EspEvent], str | None]]:
        def work(config: EspSettings, body: bytes) -> tuple[list[esp.EspEvent], str | None]:
            secret = need(config.postmark_webhook_secret, "OUTREACH_POSTMARK_WEBHOOK_SECRET",
                          "Postmark")
            esp.verify_postmark(secret, presented)
            return esp.parse_postmark(parse_json(body)), None
        return work

    @app.post("/esp/postmark/{secret}")
    async def postmark_in_path(secret: str, request: Request) -> JSONResponse:
        """Postmark, the secret in the URL."""
        return await handle("postmark", request, postmark_work(secret))

    @app.post("/esp/postmark")
    async def postmark_basic(request: Request) -> JSONResponse:
        """Postmark, the secret as basic-auth password."""
        presented = None
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic":
            try:
                presented = base64.b64decode(value, validate=True).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                presented = None
        return await handle("postmark", request, postmark_work(presented))
