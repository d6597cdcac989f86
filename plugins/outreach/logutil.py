"""Logging helpers for analysts: masked addresses, one summary line per batch."""

from __future__ import annotations

import logging
import re

log = logging.getLogger("outreach")


def mask(address: str | None) -> str:
    """Mask the local part of an address: ``jane.doe@acme.com`` → ``j***@acme.com``.

    Logs never carry a full address: a one-character local part (``a@acme.com``) is masked
    whole (``***@acme.com``), as is something that is not an address.
    """
    if not address:
        return ""
    local, sep, domain = address.rpartition("@")
    if not sep:
        return "***"
    return f"{_keep(local)}***@{domain}"


def _keep(local: str) -> str:
    # The first character, unless it is the whole local part.
    return local[:1] if len(local) > 1 else ""


_ADDRESS = re.compile(r"([A-Za-z0-9.!#$%&'*+/=?^_`{|}~\-\u0080-\uffff]+)"
                      r"@([A-Za-z0-9.\-\u0080-\uffff]+\.[A-Za-z\u0080-\uffff]{2,})")


def mask_addresses(text: str) -> str:
    """Mask every address found in free text (an SMTP reply often quotes the recipient):
    ``"550 <jane@acme.com> unknown"`` → ``"550 <j***@acme.com> unknown"``."""
    return _ADDRESS.sub(lambda m: f"{_keep(m.group(1))}***@{m.group(2)}", text)


def mailbox_name(label: str | None, display_name: str | None = None,
                 address: str | None = None) -> str:
    """Return how logs and the UI name a mailbox: its ``label`` from the mailbox file ("anna —
    sales"), else its display name, else its masked address — never the full address."""
    return (label or "").strip() or (display_name or "").strip() or mask(address)
