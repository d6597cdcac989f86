"""ESP event webhooks: bounces, complaints and unsubscribes from Amazon SES (through SNS), SendGrid,
Mailgun and Postmark, for mail whose DSN never reaches a mailbox we read.

A request is authenticated by its provider's scheme (else :class:`WebhookAuthError`: 401, nothing
changes), turned into :class:`EspEvent` values in the vocabulary of :mod:`outreach.reasons`, and
applied by :func:`apply_event`, once per provider, event id and recipient. Each scheme and its
sources: docs/howto/esp-webhooks.md."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from outreach.logutil import mask
from outreach.reasons import Owner, owner_of, reason_of, status_in
from outreach.store._run import Conn

PROVIDERS = ("ses", "sendgrid", "mailgun", "postmark")
_SNS_HOST = re.compile(r"^sns\.[a-z]{2}(-gov)?-[a-z]+-\d\.amazonaws\.com(\.cn)?$")
"""An SNS regional endpoint (``sns.eu-west-1.amazonaws.com``); never an S3 or other service's host."""
_SNS_CERT_PATH = re.compile(r"^/SimpleNotificationService-[0-9a-f]+\.pem$")
_MSGID = re.compile(r"<?([^<>\s]+@[^<>\s]+)>?")


class WebhookAuthError(Exception):
    """The request is not authentically from the provider (bad or missing signature, a topic not
    ours, a replayed or stale request): answered 401, nothing changes."""


class WebhookPayloadError(ValueError):
    """The request is authentic but its body is not what the provider sends: answered 400."""


@dataclass(frozen=True)
class EspEvent:
    """One provider event about one recipient; ``occurred_at`` in UTC, as the provider says.

    ``kind``: ``bounce``, ``complaint``, ``unsubscribe``, ``delivered``, ``delayed`` or ``other``
    (no effect). ``message_id``: ours (lower-case, without <>) when echoed, else ``None`` (the
    latest email to the recipient). ``reason``/``owner``: :mod:`outreach.reasons`."""

    provider: str
    event_id: str
    kind: str
    recipient: str
    message_id: str | None = None
    status: str | None = None
    diagnostic: str | None = None
    reason: str | None = None
    owner: Owner | None = None
    occurred_at: dt.datetime | None = None


def _bounce(provider: str, event_id: str, recipient: str, message_id: str | None,
            status: str | None, diagnostic: str | None, code: int | None = None, *,
            permanent: bool | None = None, reason: str | None = None,
            occurred_at: dt.datetime | None = None) -> EspEvent:
    """A bounce event described by :func:`outreach.reasons.reason_of` (or ``reason`` when the
    provider names it unmistakably). A provider's "temporary" never counts as the address gone."""
    status = status or status_in(diagnostic)
    reason = reason or reason_of(status, diagnostic, code)
    if permanent is False and owner_of(reason) != "transient":
        reason = "delayed"  # the provider will retry: neither proof the address is gone nor a block
    diag = " ".join((diagnostic or "").split())[:500] or None
    return EspEvent(provider, event_id, "bounce", recipient.strip().lower(), message_id, status,
                    diag, reason, owner_of(reason), occurred_at)


def _our_id(value: Any) -> str | None:
    m = _MSGID.search(str(value or ""))
    return m.group(1).lower() if m else None


def _epoch(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(float(value), dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _iso(value: Any) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _within(timestamp: Any, window: int, now: dt.datetime | None) -> None:
    moment = _epoch(timestamp)
    now = now or dt.datetime.now(dt.UTC)
    if moment is None or abs((now - moment).total_seconds()) > window:
        raise WebhookAuthError("the request's timestamp is missing or outside the replay window")


# --- Amazon SES through SNS -----------------------------------------------------------------

_SNS_FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                 "TopicArn", "Type"),
    "UnsubscribeConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                "TopicArn", "Type"),
}


def sns_host_ok(url: str) -> bool:
    """Whether ``url`` is https on an ``sns.<region>.amazonaws.com`` host (the only place SNS
    certificates and subscription URLs live)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number
        return False
    return (parts.scheme == "https" and bool(_SNS_HOST.match(parts.hostname or "")) and port is None
            and not parts.username and "@" not in parts.netloc)


def verify_sns(body: dict[str, Any], topics: Iterable[str], fetch: Callable[[str], bytes]) -> None:
    """Check an SNS message's signature and topic.

    :param body: the POSTed JSON object.
    :param topics: our topic ARNs (:attr:`outreach.settings.EspSettings.ses_topic_arns`).
    :param fetch: ``url -> bytes`` of the PEM certificate (only for an SNS host).
    :raises WebhookAuthError: unknown type or topic, a certificate off SNS, a bad signature."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    kind = body.get("Type")
    if not isinstance(kind, str) or kind not in _SNS_FIELDS:
        raise WebhookAuthError(f"not an SNS message (Type {str(kind)[:40]!r})")
    required = [f for f in _SNS_FIELDS[kind] if f != "Subject"]
    fields = (*_SNS_FIELDS[kind], "SigningCertURL", "Signature", "SignatureVersion")
    if any(not isinstance(body.get(f), str) for f in (*required, "SigningCertURL", "Signature",
                                                      "SignatureVersion")) \
            or any(f in body and not isinstance(body[f], str) for f in fields):
        # Every signed field must be there: a field left out shifts the signed text (a field's
        # value could then pose as the next one's).
        raise WebhookAuthError(f"an SNS {kind} needs every field of {', '.join(required)} as text")
    if body["TopicArn"] not in set(topics):
        raise WebhookAuthError("the SNS topic is not one of OUTREACH_SES_TOPIC_ARNS")
    cert_url = body["SigningCertURL"]
    if not sns_host_ok(cert_url) or not _SNS_CERT_PATH.match(urllib.parse.urlsplit(cert_url).path):
        raise WebhookAuthError("SigningCertURL is not https://sns.<region>.amazonaws.com/"
                               "SimpleNotificationService-<hex>.pem")
    algorithm = {"1": hashes.SHA1(), "2": hashes.SHA256()}.get(str(body.get("SignatureVersion")))
    if algorithm is None:
        raise WebhookAuthError("unknown SNS SignatureVersion")
    signed = "".join(f"{name}\n{body[name]}\n" for name in _SNS_FIELDS[kind] if name in body)
    try:
        key = x509.load_pem_x509_certificate(fetch(cert_url)).public_key()
        signature = base64.b64decode(str(body.get("Signature", "")), validate=True)
    except (ValueError, TypeError) as exc:
        raise WebhookAuthError(f"SNS certificate or signature unreadable: {type(exc).__name__}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise WebhookAuthError("the SNS certificate's key is not RSA")
    try:
        key.verify(signature, signed.encode(), padding.PKCS1v15(), algorithm)
    except InvalidSignature:
        raise WebhookAuthError("the SNS signature does not verify") from None


def parse_ses(body: dict[str, Any]) -> list[EspEvent]:
    """The events of one verified SNS ``Notification`` carrying an SES notification (bounce,
    complaint, delivery) or SES event publishing record (``eventType``).

    :raises WebhookPayloadError: the message is not SES JSON.
    """
    try:
        message = json.loads(body["Message"])
    except (KeyError, TypeError, ValueError):
        raise WebhookPayloadError("the SNS Message is not SES JSON") from None
    if not isinstance(message, dict):
        raise WebhookPayloadError("the SNS Message is not a JSON object")
    event_id = str(body.get("MessageId", ""))[:200]
    kind = str(message.get("notificationType") or message.get("eventType") or "")
    mail = message.get("mail") or {}
    ours = _our_id(next((h.get("value") for h in mail.get("headers") or []
                         if str(h.get("name", "")).lower() == "message-id"), None)
                   or (mail.get("commonHeaders") or {}).get("messageId"))
    out: list[EspEvent] = []
    if kind == "Bounce":
        bounce = message.get("bounce") or {}
        permanent = {"Permanent": True, "Transient": False}.get(str(bounce.get("bounceType")))
        when = _iso(bounce.get("timestamp"))
        for r in bounce.get("bouncedRecipients") or []:
            if r.get("emailAddress"):
                out.append(_bounce("ses", event_id, str(r["emailAddress"]), ours, r.get("status"),
                                   r.get("diagnosticCode"), permanent=permanent, occurred_at=when))
    elif kind == "Complaint":
        complaint = message.get("complaint") or {}
        for r in complaint.get("complainedRecipients") or []:
            if r.get("emailAddress"):
                out.append(EspEvent("ses", event_id, "complaint", str(r["emailAddress"]).lower(),
                                    ours, reason="feedback", owner="none",
                                    occurred_at=_iso(complaint.get("timestamp"))))
    elif kind in ("Delivery", "DeliveryDelay"):
        for address in mail.get("destination") or []:
            out.append(EspEvent("ses", event_id, "delivered" if kind == "Delivery" else "delayed",
                                str(address).lower(), ours))
    return out


# --- SendGrid -------------------------------------------------------------------------------

def verify_sendgrid(public_key_b64: str, signature_b64: str | None, timestamp: str | None,
                    body: bytes, *, window: int, now: dt.datetime | None = None) -> None:
    """Check SendGrid's Signed Event Webhook signature (ECDSA P-256, SHA-256, over
    ``timestamp + body``) and the timestamp's age.

    :raises WebhookAuthError: missing headers, a stale timestamp, a bad signature or key.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if not signature_b64 or not timestamp:
        raise WebhookAuthError("missing X-Twilio-Email-Event-Webhook-Signature or -Timestamp")
    _within(timestamp, window, now)
    try:
        key = serialization.load_der_public_key(base64.b64decode(public_key_b64))
        signature = base64.b64decode(signature_b64, validate=True)
    except (ValueError, TypeError):
        raise WebhookAuthError("the SendGrid signature or key is not base64 DER") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise WebhookAuthError("OUTREACH_SENDGRID_WEBHOOK_PUBLIC_KEY is not an EC public key")
    try:
        key.verify(signature, timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise WebhookAuthError("the SendGrid signature does not verify") from None


def parse_sendgrid(events: Any) -> list[EspEvent]:
    """The events of a verified SendGrid Event Webhook POST (a JSON array).

    ``bounce``/``blocked`` → bounce; ``dropped`` → other (nothing sent); ``deferred`` → delayed;
    ``spamreport`` → complaint; ``(group_)unsubscribe`` → unsubscribe; ``delivered``; else other.

    :raises WebhookPayloadError: not a JSON array of objects with ``sg_event_id`` and ``email``."""
    if not isinstance(events, list):
        raise WebhookPayloadError("a SendGrid Event Webhook body is a JSON array")
    out = []
    for e in events:
        if not isinstance(e, dict) or not e.get("sg_event_id") or not e.get("email"):
            raise WebhookPayloadError("a SendGrid event without sg_event_id or email")
        event_id, rcpt = str(e["sg_event_id"])[:200], str(e["email"])
        ours, when, name = _our_id(e.get("smtp-id")), _epoch(e.get("timestamp")), e.get("event")
        if name == "bounce":
            blocked = e.get("type") == "blocked"
            out.append(_bounce("sendgrid", event_id, rcpt, ours, e.get("status"), e.get("reason"),
                               reason="blocked" if blocked and not status_in(e.get("reason"))
                               and not e.get("status") else None, occurred_at=when))
        elif name == "spamreport":
            out.append(EspEvent("sendgrid", event_id, "complaint", rcpt.lower(), ours,
                                reason="feedback", owner="none", occurred_at=when))
        elif name in ("unsubscribe", "group_unsubscribe"):
            out.append(EspEvent("sendgrid", event_id, "unsubscribe", rcpt.lower(), ours,
                                occurred_at=when))
        else:
            kind = {"delivered": "delivered", "deferred": "delayed"}.get(str(name), "other")
            out.append(EspEvent("sendgrid", event_id, kind, rcpt.lower(), ours, occurred_at=when))
    return out


# --- Mailgun --------------------------------------------------------------------------------

def verify_mailgun(signing_key: str, body: Any, *, window: int,
                   now: dt.datetime | None = None) -> str:
    """Check a Mailgun webhook's ``signature`` object; return its token (to refuse reuse).

    :raises WebhookAuthError: missing fields, a stale timestamp, a bad signature.
    """
    sig = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(sig, dict) or not all(isinstance(sig.get(k), str | int)
                                            for k in ("timestamp", "token", "signature")):
        raise WebhookAuthError("missing Mailgun signature {timestamp, token, signature}")
    _within(sig["timestamp"], window, now)
    expected = hmac.new(signing_key.encode(), f"{sig['timestamp']}{sig['token']}".encode(),
                        hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), str(sig["signature"]).encode()):
        raise WebhookAuthError("the Mailgun signature does not verify")
    return str(sig["token"])


def parse_mailgun(body: dict[str, Any]) -> list[EspEvent]:
    """The event of a verified Mailgun webhook (``event-data``).

    ``failed`` (``severity`` permanent or temporary) → a bounce; ``complained`` → complaint;
    ``unsubscribed``; ``delivered``; the rest → other.

    :raises WebhookPayloadError: no ``event-data`` with ``id`` and ``recipient``.
    """
    data = body.get("event-data")
    if not isinstance(data, dict) or not data.get("id") or not data.get("recipient"):
        raise WebhookPayloadError("a Mailgun webhook without event-data.id or recipient")
    event_id, rcpt = str(data["id"])[:200], str(data["recipient"])
    ours = _our_id(((data.get("message") or {}).get("headers") or {}).get("message-id"))
    when, name = _epoch(data.get("timestamp")), data.get("event")
    if name == "failed":
        ds = data.get("delivery-status") or {}
        code = ds.get("code") if isinstance(ds.get("code"), int) else None
        diagnostic = " ".join(str(ds.get(k) or "") for k in ("message", "description")).strip()
        return [_bounce("mailgun", event_id, rcpt, ours, ds.get("enhanced-code"), diagnostic, code,
                        permanent=data.get("severity") == "permanent", occurred_at=when)]
    kind = {"complained": "complaint", "unsubscribed": "unsubscribe", "delivered": "delivered"}.get(
        str(name), "other")
    return [EspEvent("mailgun", event_id, kind, rcpt.lower(), ours,
                     reason="feedback" if kind == "complaint" else None,
                     owner="none" if kind == "complaint" else None, occurred_at=when)]


# --- Postmark -------------------------------------------------------------------------------

def verify_postmark(secret: str, presented: str | None) -> None:
    """Compare the secret in the URL or basic-auth password with ours, in constant time.

    :raises WebhookAuthError: missing or different.
    """
    if not presented or not hmac.compare_digest(secret.encode(), presented.encode()):
        raise WebhookAuthError("the Postmark webhook secret is missing or wrong")


_POSTMARK_REASON = {"BadEmailAddress": "userunknown", "DnsError": "hostunknown",
                    "Blocked": "blocked", "DMARCPolicy": "authfailure",
                    "SpamNotification": "spamdetected", "VirusNotification": "virusdetected",
                    "ManuallyDeactivated": "suspend", "AutoResponder": "vacation"}
"""Postmark bounce types whose name alone is the reason (Postmark's bounce API, "Bounce types")."""


def parse_postmark(body: Any) -> list[EspEvent]:
    """The event of a verified Postmark webhook (``RecordType`` Bounce, SpamComplaint,
    SubscriptionChange, Delivery).

    :raises WebhookPayloadError: not an object with ``RecordType`` and a recipient.
    """
    if not isinstance(body, dict) or not body.get("RecordType"):
        raise WebhookPayloadError("a Postmark webhook without RecordType")
    record = body["RecordType"]
    rcpt = str(body.get("Email") or body.get("Recipient") or "")
    if not rcpt:
        raise WebhookPayloadError("a Postmark webhook without Email or Recipient")
    event_id = f"{record}:{body.get('ID') or body.get('MessageID') or ''}"[:200]
    ours = _our_id(next((h.get("Value") for h in body.get("Headers") or []
                         if str(h.get("Name", "")).lower() == "message-id"), None))
    when = _iso(body.get("BouncedAt") or body.get("DeliveredAt") or body.get("ChangedAt") or "")
    if record == "Bounce":
        kind = str(body.get("Type", ""))
        diagnostic = " ".join(str(body.get(k) or "") for k in ("Description", "Details")).strip()
        if kind == "AutoResponder":
            return [EspEvent("postmark", event_id, "other", rcpt.lower(), ours, reason="vacation",
                             owner="none", occurred_at=when)]
        reason = _POSTMARK_REASON.get(kind)
        if reason is None and kind == "HardBounce":
            told = reason_of(None, diagnostic, 550)
            reason = told if owner_of(told) in ("address", "sender") else "userunknown"
        permanent = (True if kind in ("HardBounce", "BadEmailAddress", "DnsError")
                     else False if kind in ("SoftBounce", "Transient") else None)
        return [_bounce("postmark", event_id, rcpt, ours, None, diagnostic, permanent=permanent,
                        reason=reason, occurred_at=when)]
    if record == "SpamComplaint":
        return [EspEvent("postmark", event_id, "complaint", rcpt.lower(), ours, reason="feedback",
                         owner="none", occurred_at=when)]
    if record == "SubscriptionChange" and body.get("SuppressSending"):
        return [EspEvent("postmark", event_id, "unsubscribe", rcpt.lower(), ours, occurred_at=when)]
    kind = "delivered" if record == "Delivery" else "other"
    return [EspEvent("postmark", event_id, kind, rcpt.lower(), ours, occurred_at=when)]


def describe(event: EspEvent) -> str:
    """One masked line for logs: provider, kind, reason, recipient."""
    reason = f" {event.reason} ({event.owner})" if event.reason else ""
    return f"{event.provider} {event.kind}{reason} for {mask(event.recipient)}"


def apply_event(conn: Conn, event: EspEvent) -> str | None:
    """Record one event (``outreach.esp_events``, UNIQUE per provider, event id and recipient) and apply
    its effect to our email (echoed Message-ID, else the latest sent; none: nothing), in the caller's
    transaction: a bounce via :func:`outreach.bounces.apply_failure`, a complaint or unsubscribe
    suppresses.

    :returns: what was done, in words for people (masked); ``None`` when already applied."""
    from outreach.addresses import normal_form
    from outreach.store import emails as emails_store
    from outreach.store import esp_events as store
    from outreach.suppression import suppress

    matched = None
    if event.message_id:
        found = emails_store.email_by_message_ids(conn, ids=[event.message_id])
        matched = found[0] if found else None
    if matched is None and event.kind in ("bounce", "complaint", "unsubscribe"):
        matched = emails_store.email_latest_sent_to(conn, address=normal_form(event.recipient),
                                                    mailbox_id=None)
    event_row = store.esp_event_insert(
        conn, provider=event.provider, event_id=event.event_id, recipient=event.recipient,
        kind=event.kind, message_id=event.message_id, status=event.status,
        diagnostic=event.diagnostic, reason=event.reason, owner=event.owner,
        occurred_at=event.occurred_at, email_id=matched.id if matched else None)
    if event_row is None:
        return None
    effect = _effect(conn, event, matched, f"esp:{event.provider}:{event_row}", suppress)
    store.esp_event_set_effect(conn, id=event_row, effect=effect[:500])
    return effect


def _effect(conn: Conn, event: EspEvent, matched: Any, source: str,
            suppress: Callable[..., tuple[bool, int]]) -> str:
    if event.kind not in ("bounce", "complaint", "unsubscribe"):
        return "none"
    if matched is None or not matched.email:
        return "none: no email of ours matched"
    actor = f"{event.provider} webhook"
    if event.kind == "bounce":
        from outreach.bounces import apply_failure

        return apply_failure(conn, email_id=matched.id, mailbox_id=matched.mailbox_id,
                             address=matched.email, reason=event.reason or "undefined",
                             status=event.status, diagnostic=event.diagnostic, source=source,
                             actor=actor, now=None).text
    reason = "complained" if event.kind == "complaint" else "unsubscribed"
    added, cancelled = suppress(conn, matched.email, reason, source, actor=actor)
    return (f"suppressed {mask(matched.email)} ({reason}), {cancelled} queued cancelled"
            if added else f"{mask(matched.email)} was already suppressed")
