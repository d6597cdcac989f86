"""Signed unsubscribe tokens (itsdangerous, HMAC-SHA1 by default, URL-safe, time-stamped).

A token names one email row. It cannot be forged or altered without the secret, so nobody can
unsubscribe someone else by editing a URL.
"""

from __future__ import annotations

import datetime as dt

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer

_SALT = "outreach-unsubscribe-v1"
MAX_AGE_SECONDS = 400 * 24 * 3600  # a List-Unsubscribe link must keep working for a long time


class TokenError(ValueError):
    """The token is malformed, tampered with, or expired (``expired`` says which)."""

    def __init__(self, message: str, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


def make_token(secret: str, email_id: int, issued_at: dt.datetime | None = None) -> str:
    """Return a URL-safe token for email row ``email_id``, time-stamped ``issued_at`` (aware,
    whole seconds count; default now). The sender passes the message's Date, so the same row
    built at the same moment gives the same token (``outreach campaign preview``)."""
    if issued_at is None:
        return URLSafeTimedSerializer(secret, salt=_SALT).dumps(int(email_id))
    stamp = int(issued_at.timestamp())

    class _Issued(TimestampSigner):
        def get_timestamp(self) -> int:
            return stamp

    return URLSafeTimedSerializer(secret, salt=_SALT, signer=_Issued).dumps(int(email_id))


def read_token(secret: str, token: str, max_age: int = MAX_AGE_SECONDS) -> int:
    """Return the email id named by ``token``.

    :param max_age: seconds a token stays valid.
    :raises TokenError: bad signature, malformed, or older than ``max_age``.
    """
    try:
        value = URLSafeTimedSerializer(secret, salt=_SALT).loads(token, max_age=max_age)
    except SignatureExpired:
        raise TokenError("this unsubscribe link has expired", expired=True) from None
    except BadSignature:
        raise TokenError("this unsubscribe link is not valid") from None
    if not isinstance(value, int):
        raise TokenError("this unsubscribe link is not valid")
    return value
