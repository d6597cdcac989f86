"""DKIM signing: verified with dkimpy against the test's public key (no network), on a message
built in memory and on messages the aiosmtpd sink really received."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dkim
import pytest
from dkim.util import parse_tag_value

from outreach.airflow.connections import dkim_private_key, smtp_connector
from outreach.leads import import_leads
from outreach.message import build_message, to_wire
from outreach.queue import queue_due
from outreach.render import render
from outreach.send import MailboxUnreachable, raise_if_unreachable, send_batch
from outreach.signing import DkimKey, SigningError, headers_to_sign, public_key_record, sign
from outreach.suppression import import_suppressions
from support import invariants
from support.dnszone import rsa_key
from support.flow import rows, scalar
from support.paths import CAMPAIGN, DNC, LEADS, ROOT
from support.samples import CTX, envelope

SELECTOR, DOMAIN = "s2026", "mail.outreach-demo.example"
REQUIRED = {"from", "to", "subject", "date", "message-id", "list-unsubscribe",
            "list-unsubscribe-post", "feedback-id"}


def dns_for(key_pem: bytes, selector: str = SELECTOR, domain: str = DOMAIN):
    """A dkimpy ``dnsfunc`` that knows one key record, as a DNS server would serve it."""
    record = public_key_record(key_pem).encode()

    def dnsfunc(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name.decode().rstrip(".") == f"{selector}._domainkey.{domain}" else None

    return dnsfunc


def signature_tags(wire: bytes) -> dict[bytes, bytes]:
    head = wire.split(b"\r\n\r\n", 1)[0].replace(b"\r\n", b"\n")
    value = head.split(b"DKIM-Signature:", 1)[1].split(b"\n")
    lines = [value[0]] + [ln for ln in value[1:1 + len(value)] if ln[:1] in (b" ", b"\t")]
    joined = b"".join(lines)
    return parse_tag_value(b"".join(joined.split()))


def signed_message() -> bytes:
    msg = build_message(render("ops_intro", "Subject", CTX), envelope(from_address=f"anna@{DOMAIN}"))
    return sign(to_wire(msg), DkimKey(SELECTOR, DOMAIN, rsa_key()))


def test_signature_verifies_and_covers_the_required_headers():
    wire = signed_message()
    assert dkim.verify(wire, dnsfunc=dns_for(rsa_key()))
    tags = signature_tags(wire)
    signed = [h.strip().lower() for h in tags[b"h"].decode().split(":")]
    assert REQUIRED <= set(signed)
    # The one-click headers and From are over-signed: a second copy added later breaks it.
    assert signed.count("list-unsubscribe") == 2 and signed.count("from") == 2
    assert (tags[b"d"], tags[b"s"], tags[b"a"]) == (DOMAIN.encode(), SELECTOR.encode(), b"rsa-sha256")


@pytest.mark.parametrize("change", [
    lambda w: w.replace(b"List-Unsubscribe-Post: List-Unsubscribe=One-Click",
                        b"List-Unsubscribe-Post: List-Unsubscribe=Two-Clicks"),
    lambda w: w.replace(b"\r\nList-Unsubscribe: ",
                        b"\r\nList-Unsubscribe: <https://evil.example/u>\r\nList-Unsubscribe: ", 1),
    lambda w: w.replace(b"Feedback-ID: c:m1:cold:outreach", b"Feedback-ID: c:m1:cold:somebody"),
    lambda w: w.replace(b"Subject: Subject", b"Subject: Changed"),
])
def test_changing_a_signed_header_breaks_the_signature(change):
    wire = signed_message()
    changed = change(wire)
    assert changed != wire
    assert not dkim.verify(changed, dnsfunc=dns_for(rsa_key()))


def test_the_openssl_seam_in_dkimpy_is_where_signing_expects_it():
    """The names outreach.signing replaces are dkimpy 1.1.8's (requirements.txt pins it): when a
    new dkimpy moves them, this fails and the seam must be reviewed before the pin changes."""
    import importlib.metadata
    import inspect

    import dkim.crypto

    from outreach import signing

    assert importlib.metadata.version("dkimpy") == "1.1.8"
    assert signing.OPENSSL_SIGNER
    assert dkim.parse_pem_private_key is signing._parse_pem_private_key
    assert dkim.RSASSA_PKCS1_v1_5_sign is signing._rsassa_pkcs1_v1_5_sign
    assert signing._DKIMPY_RSASSA_SIGN is dkim.crypto.RSASSA_PKCS1_v1_5_sign
    assert signing._DKIMPY_PARSE is dkim.crypto.parse_pem_private_key
    assert list(inspect.signature(dkim.crypto.RSASSA_PKCS1_v1_5_sign).parameters) == [
        "hash", "private_key"]
    assert "pk = parse_pem_private_key(privkey)" in inspect.getsource(dkim.DKIM.sign)
    assert "RSASSA_PKCS1_v1_5_sign(h, pk)" in inspect.getsource(dkim.DomainSigner.gen_header)


def test_the_openssl_signature_is_dkimpys_own_byte_for_byte(monkeypatch):
    """The same message, key and clock signed by outreach.signing (OpenSSL) and by dkimpy alone
    (its pure-Python RSA, from the PEM) give the same DKIM-Signature header, and ours never runs
    dkimpy's RSA."""
    import time

    import dkim.crypto
    from cryptography.hazmat.primitives import serialization

    monkeypatch.setattr(time, "time", lambda: 1_767_225_600.0)
    wire = to_wire(build_message(render("ops_intro", "Subject", CTX),
                                 envelope(from_address=f"anna@{DOMAIN}")))
    key = DkimKey(SELECTOR, DOMAIN, rsa_key())
    pkcs1 = serialization.load_pem_private_key(key.private_key, None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption())
    reference = dkim.sign(wire, SELECTOR.encode(), DOMAIN.encode(), pkcs1,
                          canonicalize=(b"relaxed", b"relaxed"),
                          include_headers=[h.encode() for h in headers_to_sign(wire)])

    def pure_python_rsa(*args):
        raise AssertionError("outreach.signing ran dkimpy's pure-Python RSA")

    monkeypatch.setattr(dkim.crypto, "rsa_decrypt", pure_python_rsa)
    ours = sign(wire, key)
    assert ours == reference + wire
    assert dkim.verify(ours, dnsfunc=dns_for(key.private_key))


def test_a_different_published_key_does_not_verify():
    assert not dkim.verify(signed_message(), dnsfunc=dns_for(rsa_key(label="other")))


def test_unusable_keys_are_refused():
    wire = to_wire(build_message(render("ops_intro", "S", CTX), envelope()))
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with pytest.raises(SigningError, match="must be RSA"):
        sign(wire, DkimKey(SELECTOR, DOMAIN, ec_pem))
    with pytest.raises(SigningError, match="not an unencrypted PEM"):
        sign(wire, DkimKey(SELECTOR, DOMAIN, b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"))
    assert "PRIVATE" not in repr(DkimKey(SELECTOR, DOMAIN, rsa_key()))


def dkim_mailboxes(tmp_path: Path) -> Path:
    text = (ROOT / "include" / "mailboxes.yaml").read_text().replace(
        "    warmup_start: 2026-01-05\n",
        f"    warmup_start: 2026-01-05\n    dkim_selector: {SELECTOR}\n"
        "    dkim_key_conn_id: outreach_dkim_test\n")
    path = tmp_path / "mailboxes.yaml"
    path.write_text(text)
    return path


def raw_messages(sink) -> list[bytes]:
    return [p.read_bytes() for p in sorted((sink.maildir / "new").iterdir())]


def test_messages_received_by_the_smtp_server_verify(db_url, sink, settings, tmp_path, monkeypatch):
    key = rsa_key()
    # The key comes from an Airflow connection (here from the environment), as in production.
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_DKIM_TEST",
                       json.dumps({"conn_type": "generic", "password": key.decode()}))
    import_suppressions(db_url, DNC)
    import_leads(db_url, CAMPAIGN, dkim_mailboxes(tmp_path), LEADS)
    queue_due(db_url)
    summary = send_batch(db_url, 1, 25, smtp_connector, settings,
                         dkim_keys=dkim_private_key)
    assert summary.sent == 25
    received = raw_messages(sink)
    assert len(received) == 25
    for raw in received:
        # Maildir keeps the message with local line ends; SMTP carried it with CRLF.
        wire = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        assert dkim.verify(wire, dnsfunc=dns_for(key)), raw[:400]
        assert REQUIRED <= {h.strip().lower() for h in
                            signature_tags(wire)[b"h"].decode().split(":")}
    invariants.assert_ok(db_url, sink.messages())


def test_missing_dkim_key_sends_nothing_requeues_and_fails_the_mailbox(db_url, sink, settings, tmp_path, monkeypatch):
    """A missing DKIM key is the mailbox's configuration failure before any handoff, like a
    refused connection (issue 12.6b): the rows go back without counting attempts (they used to
    burn one each run) and the mailbox's run fails, naming the key's connection."""
    monkeypatch.delenv("AIRFLOW_CONN_OUTREACH_DKIM_TEST", raising=False)
    import_leads(db_url, CAMPAIGN, dkim_mailboxes(tmp_path), LEADS)
    queue_due(db_url)
    now = dt.datetime.now(dt.UTC)
    summary = send_batch(db_url, 1, 5, smtp_connector, settings, now=now,
                         dkim_keys=dkim_private_key)
    assert (summary.sent, summary.retried, summary.released) == (0, 0, 5)
    assert summary.unreachable["stage"] == "SIGN"
    assert summary.unreachable["conn_id"] == "outreach_dkim_test"
    with pytest.raises(MailboxUnreachable, match="DKIM key connection 'outreach_dkim_test' failed at SIGN"):
        raise_if_unreachable([summary])
    assert sink.messages() == []
    errors = rows(db_url, "SELECT status::text AS s, attempts, last_error FROM outreach.emails"
                          " WHERE last_error IS NOT NULL")
    assert len(errors) == 5
    assert all(e["s"] == "queued" and e["attempts"] == 0 and "SIGN" in e["last_error"]
               and "outreach_dkim_test" in e["last_error"] for e in errors)
    assert scalar(db_url, "SELECT count(*) FROM outreach.send_log") == 0
