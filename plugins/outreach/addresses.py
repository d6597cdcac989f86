"""What an email address is: the one normaliser, :func:`normalize_address`.

Leads, suppressions and transactional recipients are stored in this form, so one person is one
row and a suppression matches however the address was typed. The SQL side has the same rule for
text that is already an address, ``outreach.normalize_address(text)`` (migration 0008): the
suppression function and ``outreach.enqueue_transactional`` call it, and the example signup
app's users table is unique on it.
"""

from __future__ import annotations

from email_validator import EmailNotValidError, validate_email

__all__ = ["EmailNotValidError", "normal_form", "normalize_address"]


def normalize_address(raw: str) -> str:
    r"""Validate an address (syntax only, no DNS) and return its normal form.

    The normal form: leading and trailing white space removed (every character
    :meth:`str.isspace` calls white space: spaces, tabs, CR/LF, no-break spaces…), then
    email-validator's normalised address (Unicode NFC, an internationalised domain in Unicode,
    IDNA UTS #46), lower-cased as a whole, so that the same address written with different letter
    case is one lead. (RFC 5321 §2.4 leaves the local part's case to the receiving server; every
    mail provider in practice ignores it.) About 33 µs an address; email-validator decides every
    address itself.

    :param raw: an address as a person or a file wrote it.
    :returns: for example ``"zoë@bücher.example"`` for ``" Zoë@XN--BCHER-KVA.example\t"``.
    :raises EmailNotValidError: the address is not valid (the message says why).
    """
    return validate_email(raw.strip(), check_deliverability=False).normalized.lower()


def normal_form(address: str) -> str:
    """Return :func:`normalize_address` of ``address``, or ``address`` unchanged when that
    refuses it: the form to look up an address that came from somewhere that did not normalise
    it, such as inbound mail (a DSN names the recipient as RCPT TO had it, its domain
    IDNA-encoded: ``jo@xn--bcher-kva.example`` is the lead ``jo@bücher.example``).

    :param address: an address as another system wrote it (``""`` stays ``""``).
    :returns: the normal form, or ``address`` itself when it is not a valid address.
    """
    try:
        return normalize_address(address)
    except EmailNotValidError:
        return address
