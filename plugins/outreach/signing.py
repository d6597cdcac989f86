"""DKIM signing (RFC 6376) with dkimpy, on the wire bytes right before the SMTP handoff.

Gmail and Yahoo require DKIM (bulk senders: SPF *and* DKIM, with the From domain aligned for
DMARC), and RFC 8058 §4 requires the signature to cover ``List-Unsubscribe`` and
``List-Unsubscribe-Post``. The signing domain ``d=`` is the mailbox's own domain, so DKIM is aligned
with From by construction. Keys are RSA (at least 1024 bits, Gmail's minimum; 2048 recommended);
the private key comes from an Airflow connection and is never logged or stored in the database.
"""

from __future__ import annotations

import base64
import functools
import re
from dataclasses import dataclass, field

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

#: Header fields the signature covers when present (``h=``), in this order. Feedback-ID is
#: covered when the message has one (Gmail: the header must be DKIM-signed).
SIGNED_HEADERS = ("From", "To", "Subject", "Date", "Message-ID", "MIME-Version", "Content-Type",
                  "List-Unsubscribe", "List-Unsubscribe-Post", "Feedback-ID")
#: Listed once more in ``h=`` ("over-signing", RFC 6376 §8.15): a second copy added in transit,
#: say another List-Unsubscribe, breaks the signature instead of riding along.
OVERSIGNED = ("From", "Subject", "List-Unsubscribe", "List-Unsubscribe-Post")
MIN_KEY_BITS = 1024

_HEADER_NAME = re.compile(rb"^([!-9;-~]+):", re.MULTILINE)


class SigningError(ValueError):
    """The DKIM key is missing, unreadable, not RSA or too short; or signing failed."""


@dataclass(frozen=True)
class DkimKey:
    """A DKIM signing key: ``selector``, ``domain`` (ASCII/IDNA) and the PEM ``private_key``
    (bytes; PKCS#1 or PKCS#8, unencrypted). Its repr never shows the key."""

    selector: str
    domain: str
    private_key: bytes = field(repr=False)


def _load_rsa(pem: bytes) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"the DKIM private key is not an unencrypted PEM key ({exc})") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise SigningError("the DKIM private key must be RSA")
    if key.key_size < MIN_KEY_BITS:
        raise SigningError(f"the DKIM key has {key.key_size} bits; at least {MIN_KEY_BITS} are "
                           "needed (Gmail ignores shorter keys; use 2048)")
    return key


@functools.lru_cache(maxsize=16)
def _pkcs1_pem(pem: bytes) -> bytes:
    """The key checked (:func:`_load_rsa`) and written as PKCS#1 PEM, as dkimpy reads it; once
    per key and process: loading checks the RSA key, about 35 ms, six times the signature."""
    return _load_rsa(pem).private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.TraditionalOpenSSL,
                                        serialization.NoEncryption())


def public_key_b64(private_key_pem: bytes) -> str:
    """Return the ``p=`` value (base64 DER SubjectPublicKeyInfo) for a PEM RSA private key.

    :raises SigningError: the key is unusable (see :class:`SigningError`).
    """
    der = _load_rsa(private_key_pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode("ascii")


def public_key_record(private_key_pem: bytes) -> str:
    """Return the TXT record to publish at ``<selector>._domainkey.<domain>``
    (``v=DKIM1; k=rsa; p=…``, RFC 6376 §3.6.1).

    :raises SigningError: the key is unusable.
    """
    return f"v=DKIM1; k=rsa; p={public_key_b64(private_key_pem)}"


def headers_to_sign(wire: bytes) -> list[str]:
    """Return the ``h=`` list for a message: :data:`SIGNED_HEADERS` that are present, then
    :data:`OVERSIGNED` ones again."""
    head = wire.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    present = {m.group(1).decode("ascii").lower() for m in _HEADER_NAME.finditer(head)}
    names = [h for h in SIGNED_HEADERS if h.lower() in present]
    return names + [h for h in OVERSIGNED if h in names]


def sign(wire: bytes, key: DkimKey) -> bytes:
    """Return ``wire`` with a ``DKIM-Signature`` header prepended (rsa-sha256, relaxed/relaxed).

    :param wire: the message as it goes to the server (CRLF line ends).
    :param key: selector, domain and private key.
    :raises SigningError: the key is unusable or the message cannot be signed (no From).
    """
    pkcs1 = _pkcs1_pem(key.private_key)
    include = headers_to_sign(wire)
    try:
        signature = dkim.sign(wire, key.selector.encode("ascii"), key.domain.encode("ascii"),
                              pkcs1, canonicalize=(b"relaxed", b"relaxed"),
                              include_headers=[h.encode("ascii") for h in include])
    except dkim.DKIMException as exc:
        raise SigningError(f"DKIM signing failed: {exc}") from None
    return signature + wire
