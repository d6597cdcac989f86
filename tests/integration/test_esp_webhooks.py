"""ESP event webhooks (outreach.esp), spoken to over real HTTP (uvicorn on loopback) with real
PostgreSQL: mail first goes out to the real aiosmtpd sink, then SES (through SNS), SendGrid,
Mailgun and Postmark report on it. Keys, certificates and signatures are made here."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import secrets

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from outreach.queue import queue_due
from outreach.settings import EspSettings
from outreach.web.unsubscribe_app import create_app
from support.flow import import_demo, rows, scalar, send_all
from support.webservice import RunningService

TOPIC = "arn:aws:sns:eu-west-1:123456789012:outreach-ses"
CERT_URL = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0123abcd.pem"
MAILGUN_KEY = "key-" + "m" * 28
POSTMARK_SECRET = "pm-" + "s" * 29


class Keys:
    """An SNS signing certificate, a SendGrid key pair and what the service fetched."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(self.rsa.public_key()).serial_number(1)
                .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
                .sign(self.rsa, hashes.SHA256()))
        self.pem = cert.public_bytes(serialization.Encoding.PEM)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.sendgrid_public = base64.b64encode(self.ec.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
        self.fetched: list[str] = []

    def fetch(self, url: str) -> bytes:
        self.fetched.append(url)
        return self.pem if url == CERT_URL else b"<ConfirmSubscriptionResponse/>"

    def sns(self, kind: str, message: str, **extra: str) -> dict:
        body = {"Type": kind, "MessageId": secrets.token_hex(8), "TopicArn": TOPIC,
                "Message": message, "Timestamp": "2026-12-02T10:00:00.000Z",
                "SignatureVersion": "2", "SigningCertURL": CERT_URL, **extra}
        fields = (("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
                  if kind == "Notification" else
                  ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"))
        signed = "".join(f"{k}\n{body[k]}\n" for k in fields if k in body).encode()
        body["Signature"] = base64.b64encode(
            self.rsa.sign(signed, padding.PKCS1v15(), hashes.SHA256())).decode()
        return body

    def sendgrid(self, events: list[dict], *, age: int = 0) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(events).encode()
        timestamp = str(int(dt.datetime.now(dt.UTC).timestamp()) - age)
        signature = self.ec.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
        return body, {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
                      "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
                      "Content-Type": "application/json"}


def mailgun(event: dict, *, token: str | None = None, key: str = MAILGUN_KEY) -> dict:
    timestamp, token = str(int(dt.datetime.now(dt.UTC).timestamp())), token or secrets.token_hex(25)
    signature = hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()
    return {"signature": {"timestamp": timestamp, "token": token, "signature": signature},
            "event-data": event}


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def service(db_url, settings, keys):
    config = EspSettings(ses_topic_arns=(TOPIC,), sendgrid_webhook_public_key=keys.sendgrid_public,
                         mailgun_signing_key=MAILGUN_KEY, postmark_webhook_secret=POSTMARK_SECRET)
    app = create_app(lambda: db_url, lambda: settings.unsubscribe_secret,
                     esp_settings=lambda: config, esp_fetch=keys.fetch)
    with RunningService(app) as svc:
        yield svc


@pytest.fixture
def sent(db_url, sink, settings) -> list[dict]:
    """The demo's first step sent to the sink; each with its lead's address and Message-ID."""
    import_demo(db_url)
    queue_due(db_url)
    send_all(db_url, settings)
    queue_due(db_url, now=dt.datetime.now(dt.UTC) + dt.timedelta(days=3, minutes=5))  # step 2 waits
    return rows(db_url, "SELECT l.email, s.message_id FROM outreach.send_log s"
                        " JOIN outreach.emails e ON e.id = s.email_id JOIN outreach.leads l"
                        " ON l.id = e.lead_id ORDER BY e.id")


def suppressed(url: str, address: str) -> list[str]:
    return [r["reason"] for r in rows(url, "SELECT reason FROM outreach.suppressions WHERE value = %s",
                                      (address,))]


def queued_for(url: str, address: str) -> int:
    return scalar(url, "SELECT count(*) FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                       " WHERE l.email = %s AND e.status = 'queued'", (address,))


def ses_bounce(address: str, message_id: str, bounce_type: str, status: str, diagnostic: str) -> str:
    return json.dumps({
        "notificationType": "Bounce",
        "bounce": {"bounceType": bounce_type, "bounceSubType": "General",
                   "bouncedRecipients": [{"emailAddress": address, "action": "failed",
                                          "status": status, "diagnosticCode": diagnostic}],
                   "timestamp": "2026-12-02T10:00:00.000Z", "feedbackId": "x"},
        "mail": {"messageId": "ses-own-id", "destination": [address],
                 "headers": [{"name": "Message-ID", "value": f"<{message_id}>"}]}})


def test_ses_bounce_suppresses_once_and_a_forgery_changes_nothing(db_url, sent, service, keys):
    lead, other, third = sent[0], sent[1], sent[2]
    assert queued_for(db_url, lead["email"]) == 1
    body = keys.sns("Notification", ses_bounce(lead["email"], lead["message_id"], "Permanent",
                                               "5.1.1", "smtp; 550 5.1.1 user unknown"))
    with httpx.Client() as client:
        first = client.post(service.url("/esp/ses"), json=body)
        again = client.post(service.url("/esp/ses"), json=body)  # SNS retries
        assert (first.status_code, first.json()) == (200, {"events": 1, "applied": 1, "duplicates": 0})
        assert (again.status_code, again.json()) == (200, {"events": 1, "applied": 0, "duplicates": 1})
        assert suppressed(db_url, lead["email"]) == ["bounced"]
        assert queued_for(db_url, lead["email"]) == 0  # step 2 cancelled with the suppression
        assert scalar(db_url, "SELECT count(*) FROM outreach.suppression_events WHERE value = %s",
                      (lead["email"],)) == 1

        # Forgeries: a changed message, another topic, a certificate off the SNS hosts.
        tampered = keys.sns("Notification", ses_bounce(other["email"], other["message_id"], "Permanent",
                                                       "5.1.1", "550 5.1.1 user unknown"))
        tampered["Message"] = tampered["Message"].replace(other["email"], third["email"])
        foreign = keys.sns("Notification", ses_bounce(other["email"], other["message_id"], "Permanent",
                                                      "5.1.1", "550 5.1.1"), TopicArn=TOPIC + "-theirs")
        off_host = keys.sns("Notification", ses_bounce(other["email"], other["message_id"], "Permanent",
                                                       "5.1.1", "550 5.1.1"),
                            SigningCertURL="https://evil.example/sns.amazonaws.com.pem")
        # A genuinely signed message with Timestamp left out and its text appended to MessageId
        # signs the same string: refused, as every field must be there.
        shifted = keys.sns("Notification", ses_bounce(other["email"], other["message_id"], "Permanent",
                                                      "5.1.1", "550 5.1.1"))
        shifted["MessageId"] += "\nTimestamp\n" + shifted.pop("Timestamp")
        s3_host = keys.sns("Notification", ses_bounce(other["email"], other["message_id"], "Permanent",
                                                      "5.1.1", "550 5.1.1"),
                           SigningCertURL="https://sns.s3.amazonaws.com/SimpleNotificationService-0a.pem")
        for forged in (tampered, foreign, off_host, shifted, s3_host):
            r = client.post(service.url("/esp/ses"), json=forged)
            assert r.status_code == 401, r.text
    assert suppressed(db_url, other["email"]) == [] and suppressed(db_url, third["email"]) == []
    assert scalar(db_url, "SELECT count(*) FROM outreach.esp_events") == 1
    assert "https://evil.example/sns.amazonaws.com.pem" not in keys.fetched


def test_ses_sender_side_and_transient_bounces_never_suppress(db_url, sent, service, keys):
    dmarc, full = sent[0], sent[1]
    with httpx.Client() as client:
        for lead, kind, status, diag in (
                (dmarc, "Permanent", "5.7.26", "550 5.7.26 Unauthenticated email from example.com is "
                                               "not accepted due to domain's DMARC policy"),
                (full, "Transient", "4.2.2", "452 4.2.2 mailbox full")):
            body = keys.sns("Notification", ses_bounce(lead["email"], lead["message_id"], kind, status, diag))
            assert client.post(service.url("/esp/ses"), json=body).status_code == 200
    assert suppressed(db_url, dmarc["email"]) == [] and suppressed(db_url, full["email"]) == []
    # A DMARC refusal is the sending domain's problem: its mailboxes pause at once (bounces.py).
    assert scalar(db_url, "SELECT count(*) FROM outreach.mailboxes WHERE status = 'paused'") >= 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.delivery_failures WHERE source LIKE 'esp:ses:%%'") == 2
    assert rows(db_url, "SELECT reason, owner FROM outreach.esp_events ORDER BY id") == [
        {"reason": "authfailure", "owner": "sender"}, {"reason": "mailboxfull", "owner": "transient"}]


def test_sns_subscription_is_confirmed_at_its_sns_url(db_url, service, keys):
    subscribe = "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&Token=abc"
    body = keys.sns("SubscriptionConfirmation", "You have chosen to subscribe", Token="abc",
                    SubscribeURL=subscribe)
    r = httpx.post(service.url("/esp/ses"), json=body)
    assert r.status_code == 200 and subscribe in keys.fetched


def test_sendgrid_signed_events(db_url, sent, service, keys):
    blocked, complainer, gone = sent[0], sent[1], sent[2]
    events = [
        {"email": blocked["email"], "event": "bounce", "type": "blocked", "sg_event_id": "e1",
         "smtp-id": f"<{blocked['message_id']}>", "status": "5.7.1",
         "reason": "550 5.7.1 Service unavailable; client [192.0.2.1] blocked using zen.spamhaus.org",
         "timestamp": 1764669600},
        {"email": complainer["email"], "event": "spamreport", "sg_event_id": "e2",
         "smtp-id": f"<{complainer['message_id']}>", "timestamp": 1764669600},
        {"email": gone["email"], "event": "bounce", "type": "bounce", "sg_event_id": "e3",
         "status": "5.1.1", "reason": "550 5.1.1 The email account does not exist", "timestamp": 1764669600},
        {"email": gone["email"], "event": "open", "sg_event_id": "e4", "timestamp": 1764669600},
    ]
    body, headers = keys.sendgrid(events)
    with httpx.Client() as client:
        r = client.post(service.url("/esp/sendgrid"), content=body, headers=headers)
        assert (r.status_code, r.json()["applied"]) == (200, 4), r.text
        # Bad signature (another body), and a stale timestamp: refused, nothing recorded.
        stale_body, stale_headers = keys.sendgrid([{**events[0], "sg_event_id": "e9"}], age=3600)
        assert client.post(service.url("/esp/sendgrid"), content=body.replace(b"e1", b"e8"),
                           headers=headers).status_code == 401
        assert client.post(service.url("/esp/sendgrid"), content=stale_body,
                           headers=stale_headers).status_code == 401
    assert suppressed(db_url, blocked["email"]) == []  # our IP was blocked: not the lead's fault
    assert suppressed(db_url, complainer["email"]) == ["complained"]
    assert suppressed(db_url, gone["email"]) == ["bounced"]
    assert scalar(db_url, "SELECT count(*) FROM outreach.esp_events") == 4


def test_mailgun_signature_replay_and_permanent_failure(db_url, sent, service):
    lead = sent[0]
    event = {"id": "mg-1", "event": "failed", "severity": "permanent", "recipient": lead["email"],
             "timestamp": 1764669600,
             "delivery-status": {"code": 550, "message": "5.1.1 mailbox does not exist"},
             "message": {"headers": {"message-id": lead["message_id"]}}}
    signed = mailgun(event)
    with httpx.Client() as client:
        assert client.post(service.url("/esp/mailgun"), json=signed).status_code == 200
        assert client.post(service.url("/esp/mailgun"), json=signed).status_code == 401  # replayed token
        forged = mailgun({**event, "id": "mg-2", "recipient": sent[1]["email"]}, key="key-" + "x" * 28)
        assert client.post(service.url("/esp/mailgun"), json=forged).status_code == 401
    assert suppressed(db_url, lead["email"]) == ["bounced"]
    assert suppressed(db_url, sent[1]["email"]) == []


def test_a_temporary_failure_never_hides_a_later_permanent_one(db_url, sent, service):
    lead = sent[0]
    headers = {"message-id": lead["message_id"]}
    greylisted = {"id": "mg-t", "event": "failed", "severity": "temporary", "recipient": lead["email"],
                  "delivery-status": {"code": 451, "message": "4.7.1 greylisted, try again later"},
                  "message": {"headers": headers}}
    gone = {"id": "mg-p", "event": "failed", "severity": "permanent", "recipient": lead["email"],
            "delivery-status": {"code": 550, "message": "5.1.1 mailbox does not exist"},
            "message": {"headers": headers}}
    with httpx.Client() as client:
        for event in (greylisted, gone):
            assert client.post(service.url("/esp/mailgun"), json=mailgun(event)).status_code == 200
    assert suppressed(db_url, lead["email"]) == ["bounced"]
    assert rows(db_url, "SELECT owner FROM outreach.esp_events ORDER BY id") == [
        {"owner": "transient"}, {"owner": "address"}]  # a provider's retry is never a sender block


@pytest.mark.parametrize(("path", "body"), [
    ("/esp/ses", b'{"Type": ["x"]}'),
    ("/esp/ses", b'{"Type": "Notification", "TopicArn": ["x"]}'),
    ("/esp/ses", b'{"Type": "Notification", "SigningCertURL": "https://sns.eu-west-1.amazonaws.com:abc/x.pem"}'),
    ("/esp/ses", b"[" * 200_000),
    ("/esp/mailgun", b"[" * 200_000),
    ("/esp/mailgun", '{"signature": {"timestamp": "1", "token": "t", "signature": "é"}}'.encode()),
    ("/esp/sendgrid", b"{}"),
])
def test_malformed_requests_are_refused_never_a_500(db_url, service, path, body):
    r = httpx.post(service.url(path), content=body, headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 401), (r.status_code, r.text)


def test_postmark_secret_in_path_or_basic_auth(db_url, sent, service):
    hard, complainer = sent[0], sent[1]
    bounce = {"RecordType": "Bounce", "ID": 42, "Type": "HardBounce", "Email": hard["email"],
              "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist",
              "BouncedAt": "2026-12-02T10:00:00Z"}
    complaint = {"RecordType": "SpamComplaint", "ID": 43, "Type": "SpamComplaint",
                 "Email": complainer["email"]}
    with httpx.Client() as client:
        assert client.post(service.url("/esp/postmark/wrong-secret-0000000"), json=bounce).status_code == 401
        assert client.post(service.url("/esp/postmark"), json=complaint,
                           auth=("postmark", "wrong")).status_code == 401
        assert suppressed(db_url, hard["email"]) == [] and suppressed(db_url, complainer["email"]) == []
        assert client.post(service.url(f"/esp/postmark/{POSTMARK_SECRET}"), json=bounce).status_code == 200
        assert client.post(service.url("/esp/postmark"), json=complaint,
                           auth=("postmark", POSTMARK_SECRET)).status_code == 200
    assert suppressed(db_url, hard["email"]) == ["bounced"]
    assert suppressed(db_url, complainer["email"]) == ["complained"]


def test_an_event_about_an_address_we_never_mailed_changes_nothing(db_url, sent, service):
    stranger = "someone@elsewhere.example"
    bounce = {"RecordType": "Bounce", "ID": 7, "Type": "HardBounce", "Email": stranger,
              "Details": "550 5.1.1 no such user"}
    r = httpx.post(service.url(f"/esp/postmark/{POSTMARK_SECRET}"), json=bounce)
    assert r.status_code == 200
    assert suppressed(db_url, stranger) == []
    assert rows(db_url, "SELECT effect, email_id FROM outreach.esp_events") == [
        {"effect": "none: no email of ours matched", "email_id": None}]


def test_body_limit_and_unconfigured_provider(db_url, settings, keys):
    app = create_app(lambda: db_url, lambda: settings.unsubscribe_secret,
                     esp_settings=lambda: EspSettings(), esp_fetch=keys.fetch)
    with RunningService(app) as svc, httpx.Client() as client:
        big = client.post(svc.url("/esp/sendgrid"), content=b"[" + b" " * (2 * 1024 * 1024) + b"]",
                          headers={"Content-Type": "application/json"})
        assert big.status_code == 413
        r = client.post(svc.url("/esp/mailgun"), json={})
        assert r.status_code == 404 and "OUTREACH_MAILGUN_SIGNING_KEY" in r.json()["detail"]
