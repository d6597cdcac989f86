"""Logging helpers for analysts: masked addresses, one summary line per batch."""

from __future__ import annotations

import logging

log = logging.getLogger("outreach")


def mask(address: str | None) -> str:
    """Mask the local part of an address: ``jane.doe@acme.com`` → ``j***@acme.com``.

    Logs never carry a full address. Something that is not an address is masked whole.
    """
    if not address:
        return ""
    local, sep, domain = address.rpartition("@")
    if not sep:
        return "***"
    return f"{local[:1]}***@{domain}"
