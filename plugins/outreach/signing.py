"""DKIM signing (RFC 6376) with dkimpy, on the wire bytes right before the SMTP handoff.

``d=`` is the mailbox's domain (aligned with From by construction); the signature covers the
List-Unsubscribe headers (RFC 8058 §4); RSA keys of at least 1024 bits, never logged or stored.
The RSA step is OpenSSL's through a pinned seam in dkimpy (:func:`_install_openssl_signer`).
Why and how: docs/explanation/dkim-signing.md."""

from __future__ import annotations

import base64
import functools
import re
from dataclasses import dataclass, field

import dkim
import dkim.crypto
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

#: Header fields the signature covers when present (``h=``), in this order. Feedback-ID is
#: covered when the message has one (Gmail: the header must be DKIM-signed); In-Reply-To and
#: References when a follow-up replies in its thread (RFC 6376 §5.4.1 recommends both).
SIGNED_HEADERS = ("From", "To", "Subject", "Date", "Message-ID", "MIME-Version", "Content-Type",
                  "List-Unsubscribe", "List-Unsubscribe-Post", "Feedback-ID", "In-Reply-To",
                  "References")
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


class _OpenSSLKey:
    """An RSA private key loaded into OpenSSL, as dkimpy's signing functions receive it once
    :func:`_install_openssl_signer` ran (in place of the PEM bytes and of dkimpy's parsed dict)."""

    __slots__ = ("key",)

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"<DKIM RSA-{self.key.key_size} key>"

    def sign(self, digest_hash) -> bytes:
        """Return the RSASSA-PKCS1-v1_5 signature (RFC 8017 §8.2.1) of a finished ``hashlib``-like
        object (``name``, ``digest()``): what ``dkim.crypto.RSASSA_PKCS1_v1_5_sign`` returns."""
        algorithm = {"sha256": hashes.SHA256, "sha1": hashes.SHA1}[digest_hash.name.lower()]()
        return self.key.sign(digest_hash.digest(), padding.PKCS1v15(), Prehashed(algorithm))


#: dkimpy's own functions, which the replacements below hand every other key to.
_DKIMPY_PARSE = dkim.crypto.parse_pem_private_key
_DKIMPY_RSASSA_SIGN = dkim.crypto.RSASSA_PKCS1_v1_5_sign


def _parse_pem_private_key(data):
    """``dkim.crypto.parse_pem_private_key``, passing an :class:`_OpenSSLKey` through."""
    return data if isinstance(data, _OpenSSLKey) else _DKIMPY_PARSE(data)


def _rsassa_pkcs1_v1_5_sign(hash, private_key):
    """``dkim.crypto.RSASSA_PKCS1_v1_5_sign``, by OpenSSL for an :class:`_OpenSSLKey`."""
    if isinstance(private_key, _OpenSSLKey):
        return private_key.sign(hash)
    return _DKIMPY_RSASSA_SIGN(hash, private_key)


def _install_openssl_signer() -> bool:
    """Let dkimpy sign with :class:`_OpenSSLKey` keys; return whether the seam was found. Idempotent.

    Replaces ``parse_pem_private_key`` and ``RSASSA_PKCS1_v1_5_sign`` in the ``dkim`` namespace
    only; when they are not dkimpy's (it changed), nothing is replaced and signing is only slower.
    The seam: docs/explanation/dkim-signing.md#the-rsa-signature-is-openssls."""
    if (dkim.parse_pem_private_key is _parse_pem_private_key
            and dkim.RSASSA_PKCS1_v1_5_sign is _rsassa_pkcs1_v1_5_sign):
        return True
    if (dkim.parse_pem_private_key is not _DKIMPY_PARSE
            or dkim.RSASSA_PKCS1_v1_5_sign is not _DKIMPY_RSASSA_SIGN):
        return False
    dkim.parse_pem_private_key = _parse_pem_private_key
    dkim.RSASSA_PKCS1_v1_5_sign = _rsassa_pkcs1_v1_5_sign
    return True


#: Whether dkimpy signs through OpenSSL in this process (see :func:`_install_openssl_signer`).
OPENSSL_SIGNER = _install_openssl_signer()


@functools.lru_cache(maxsize=16)
def _signing_key(pem: bytes) -> _OpenSSLKey | bytes:
    """The key checked (:func:`_load_rsa`) once per key and process (loading checks the RSA key,
    about 35 ms), as dkimpy's ``sign`` takes it: an :class:`_OpenSSLKey`, or PKCS#1 PEM when the
    OpenSSL seam is missing."""
    key = _load_rsa(pem)
    if OPENSSL_SIGNER:
        return _OpenSSLKey(key)
    return key.private_bytes(serialization.Encoding.PEM,
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
    signing_key = _signing_key(key.private_key)
    include = headers_to_sign(wire)
    try:
        signature = dkim.sign(wire, key.selector.encode("ascii"), key.domain.encode("ascii"),
                              signing_key, canonicalize=(b"relaxed", b"relaxed"),
                              include_headers=[h.encode("ascii") for h in include])
    except dkim.DKIMException as exc:
        raise SigningError(f"DKIM signing failed: {exc}") from None
    return signature + wire
