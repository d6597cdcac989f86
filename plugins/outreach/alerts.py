"""Operator alerts, each sent once: the database decides who sends, not timing.

An alert is about an event with a stable key (``paused:<mailbox event id>``,
``unconfirmed:<email id>``, ``run-failed:<dag id>:<run id>``, ``preflight:<domain>:<checks>:<day>``,
``bounce-warning:<mailbox id>:<day>``, ``login-failed:<conn id>:<day>``): whoever's insert of the
key returns the row delivers, in the same transaction; a failed delivery rolls it back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from outreach import db
from outreach.logutil import log
from outreach.store import alerts as store

Deliver = Callable[[str, str], "bool | None"]
"""Given ``(subject, body)`` (plain text), deliver the alert; raise when it could not; return
``False`` when there is nowhere to deliver it (it is recorded, and the deliverer said why)."""

KINDS = ("paused", "unconfirmed", "run_failed", "preflight_fail", "bounce_warning", "login_failed")
"""Alert kinds (``outreach_alerts_kind_check`` also allows ``required_action``: an unconfirmed
email listed in a Required Action, recorded the same way so each is listed once)."""


def raise_alert(url: str, kind: str, keys: str | Sequence[str],
                compose: Callable[[list[str]], tuple[str, str]], deliver: Deliver) -> list[str]:
    """Claim the event keys that were never alerted and deliver one alert about them.

    :param kind: one of :data:`KINDS` (``outreach_alerts_kind_check``).
    :param keys: one event key, or several for one alert about many events.
    :param compose: the new keys → ``(subject, body)``; not called when none is new.
    :param deliver: sends the alert; its exception rolls the claim back and propagates.
    :returns: the new keys (``[]``: every event was alerted before, nothing was sent).
    :raises ValueError: an unknown kind."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys:
        return []
    with db.transaction(url) as conn:
        new = store.alert_claim_many(conn, event_keys=keys, kind=kind, subject="", body="")
        if not new:
            return []
        subject, body = compose(new)
        store.alert_describe(conn, event_keys=new, subject=subject, body=body)
        delivered = deliver(subject, body)
    if delivered is not False:  # one line per alert: sent, or the deliverer's "not delivered"
        log.warning("alert sent (%s, %s event(s)): %s", kind, len(new), subject)
    return new


def list_alerts(url: str) -> list[dict[str, Any]]:
    """Return every recorded alert, oldest first (``id, event_key, kind, subject, body,
    created_at``)."""
    with db.connect(url, autocommit=True) as conn:
        return [asdict(a) for a in store.alert_list(conn)]
