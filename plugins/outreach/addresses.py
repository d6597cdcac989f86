"""What an email address is: the one normaliser, :func:`normalize_address`.

Leads, suppressions and transactional recipients are stored in this form; the SQL side has the
same rule, ``outreach.normalize_address(text)`` (0008). docs/explanation/addresses.md."""

from __future__ import annotations

import functools
import types
from typing import Any

from email_validator import EmailNotValidError, validate_email

__all__ = ["EmailNotValidError", "normal_form", "normalize_address"]

DOMAINS_CACHED = 4096
"""Distinct domain parts whose verdict :func:`normalize_address` keeps (a file's leads share a few
hundred domains; the cache is bounded, so memory does not grow with the file)."""


@functools.lru_cache(maxsize=DOMAINS_CACHED)
def _domain_verdict(domain: str, test_environment: bool, globally_deliverable: bool,
                    ) -> tuple[Any, type[EmailNotValidError] | None, tuple[Any, ...]]:
    """email-validator's own domain check of ``domain``: ``(result, None, ())`` or
    ``(None, exception class, exception args)`` (an exception instance is not cached: raising
    one object twice would chain its tracebacks)."""
    try:
        return _validate_domain(domain, test_environment=test_environment,
                                globally_deliverable=globally_deliverable), None, ()
    except EmailNotValidError as exc:
        return None, type(exc), exc.args


def _cached_domain_name(domain: str, test_environment: bool = False,
                        globally_deliverable: bool = True) -> Any:
    result, error, args = _domain_verdict(domain, test_environment, globally_deliverable)
    if error is not None:
        raise error(*args)
    return result


_validate_domain = validate_email.__globals__["validate_email_domain_name"]
# email-validator's validate_email itself, run with its own module's names except one: the
# domain check is the library's, asked once per distinct domain part (it is two thirds of an
# address's check and a pure function of its arguments). The library's module is not changed;
# every other step (split, local part, NFC, length, display name) runs per address as the
# library does it. tests/unit/test_addresses_cache.py compares verdicts with validate_email's.
_validate_email = types.FunctionType(
    validate_email.__code__,
    {**validate_email.__globals__, "validate_email_domain_name": _cached_domain_name},
    validate_email.__name__, validate_email.__defaults__, validate_email.__closure__)
_validate_email.__kwdefaults__ = validate_email.__kwdefaults__


def normalize_address(raw: str) -> str:
    r"""Validate an address (syntax only, no DNS) and return its normal form: trimmed, email-validator's
    form (NFC, the domain in Unicode, IDNA UTS #46), lower-cased (docs/explanation/addresses.md).

    :param raw: an address as a person or a file wrote it.
    :returns: for example ``"zoë@bücher.example"`` for ``" Zoë@XN--BCHER-KVA.example\t"``.
    :raises EmailNotValidError: the address is not valid (the message says why)."""
    return _validate_email(raw.strip(), check_deliverability=False).normalized.lower()


def normal_form(address: str) -> str:
    """Return :func:`normalize_address` of ``address``, or ``address`` unchanged when it refuses it: for
    looking up what another system wrote (a DSN's ``jo@xn--bcher-kva.example``).

    :param address: an address as another system wrote it (``""`` stays ``""``)."""
    try:
        return normalize_address(address)
    except EmailNotValidError:
        return address
