"""The import's address check (outreach.addresses.normalize_address) asks email-validator's domain
check once per distinct domain part: its verdicts must be validate_email's, word for word, on
hostile input — each address asked cold (domain not yet seen) and warm (domain remembered, also
after the same domain was refused or accepted with another local part)."""

from __future__ import annotations

import itertools
import random

import pytest
from email_validator import EmailNotValidError, validate_email

from outreach import addresses
from outreach.addresses import normalize_address

LOCALS = [
    "jo", "Jo.Smith", "o'brien", "a+tag", "zoë", "ZOË", "x" * 64, "x" * 65, "", " ", ".jo",
    "jo.", "j..o", '"quoted"', '"a@b"', "a\u037eb", "e\u0301", "\u00e9", "jo\u200b", "jo\u202e",
    "jo\x00", "jo\r\nBcc: x@evil.example", "=?utf-8?q?x?=", "a b", "a<b", "a>b", "a,b", "(c)jo",
    "😀", "管理员", "Postmaster", "ABUSE", "a\\b", "a\tb", "\ufeffjo", "ǅ", "\u0130",
]
DOMAINS = [
    "example.com", "EXAMPLE.COM", "bücher.example", "XN--BCHER-KVA.example", "xn--zz.com",
    "a.test", "localhost", "x.local", "x.onion", "invalid", "ex_ample.com", "exa..mple.com",
    ".example.com", "example.com.", "-a.example", "a-.example", "ab--c.example", "xn--a.example",
    "a" * 63 + ".example", "a" * 64 + ".example", ".".join(["a" * 60] * 5) + ".com",
    "[127.0.0.1]", "[IPv6:::1]", "example.c", "example.123", "1.2.3.4", "例え.テスト",
    "exam\u200bple.com", "exam\u00adple.com", "ｅｘａｍｐｌｅ.com", "ex\u0301ample.com",
    "ß.example", "ς.example", "example.com\u3002org", "\u0661\u0662.example", "", "@example.com",
    "example.com>", "example.com (comment)", "ex ample.com", "exa\x00mple.com",
    "а.example",  # Cyrillic a
]


def verdict(fn, raw: str) -> tuple[str, str]:
    """``("ok", normal form)`` or ``(error class, message)``."""
    try:
        return "ok", fn(raw)
    except EmailNotValidError as exc:
        return type(exc).__name__, str(exc)


def reference(raw: str) -> str:
    return validate_email(raw.strip(), check_deliverability=False).normalized.lower()


def hostile() -> list[str]:
    pairs = [f"{lo}@{do}" for lo, do in itertools.product(LOCALS, DOMAINS)]
    rng = random.Random(16)
    rng.shuffle(pairs)  # a domain is met cold after another address of it, refused or not
    extra = ["", "@", "jo", "jo@", "@example.com", "a@b@example.com", "Jo <jo@example.com>",
             "jo@example.com, x@example.com", " \t jo@example.com \u00a0", "\x85jo@example.com",
             "jo@" + "a" * 300, "x" * 250 + "@example.com", "jo@@example.com"]
    return extra + pairs


def test_verdicts_are_validate_emails_cold_and_warm():
    addresses._domain_verdict.cache_clear()
    inputs = hostile()
    for _ in range(2):  # the second pass finds every domain remembered
        for raw in inputs:
            assert verdict(normalize_address, raw) == verdict(reference, raw), raw
    info = addresses._domain_verdict.cache_info()
    assert info.misses <= len(DOMAINS) + 13 and info.hits > 10 * info.misses  # really remembered


def test_a_refused_domain_stays_refused_and_raises_a_fresh_error():
    addresses._domain_verdict.cache_clear()
    errors = []
    for _ in range(3):
        with pytest.raises(EmailNotValidError) as caught:
            normalize_address("jo@ex_ample.com")
        errors.append(caught.value)
    assert len({id(e) for e in errors}) == 3
    assert {str(e) for e in errors} == {"The part after the @-sign contains invalid characters: '_'."}


def test_the_cache_is_bounded():
    addresses._domain_verdict.cache_clear()
    for i in range(addresses.DOMAINS_CACHED + 10):
        normalize_address(f"jo@d{i}.example")
    assert addresses._domain_verdict.cache_info().currsize == addresses.DOMAINS_CACHED
