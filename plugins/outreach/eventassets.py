"""The event Assets (issue 26, item 2): the event kinds of each family (``outreach://events/<family>``)
and the extra of a family's asset event: the id range and count of its new events.

"New" is read as the warehouse export reads (a cursor per announcer, ``assets-<announcer>``,
final events only), so no event is skipped; ids are not commit-ordered, ``count`` is exact. The
one gap (a task killed after its cursor moved) and why: docs/howto/warehouse-export.md. No Airflow
here (:func:`outreach.airflow.tasks_common.announce_events_task`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from outreach.store.exports import ExportEvent

log = logging.getLogger(__name__)

FAMILIES: dict[str, tuple[str, ...]] = {
    "replies": ("replied",),
    "auto_replies": ("auto_replied",),
    "bounces": ("bounced",),
    "complaints": ("complained",),
    "unsubscribes": ("unsubscribed",),
    "sent": ("sent",),
    "unconfirmed": ("unconfirmed",),
}
"""Family name → the ``outreach.events`` kinds (migration 0115) its Asset announces."""

ANNOUNCERS: dict[str, tuple[str, ...]] = {
    "inbox": ("replies", "auto_replies", "bounces", "complaints", "unsubscribes"),
    "send": ("sent", "unconfirmed"),
}
"""Which DAG announces which families: ``inbox`` is ``outreach_inbox``, ``send`` is
``outreach_send``. A family's events are announced by its DAG whoever wrote them (an
unsubscribe from the web page is announced by the next inbox run; a transactional send by the
next send run)."""

BATCH = 5000
"""Events read per transaction while collecting (the cursor moves batch by batch)."""


def asset_uri(family: str) -> str:
    """Return the Asset URI of an event family: ``outreach://events/<family>``.

    :raises KeyError: ``family`` is not one of :data:`FAMILIES`.
    """
    FAMILIES[family]
    return f"outreach://events/{family}"


def cursor_name(announcer: str) -> str:
    """Return the announcer's cursor (``outreach.export_cursors.target``): ``assets-<announcer>``."""
    return f"assets-{announcer}"


class _Collect:
    """An export target that keeps, per family, the first and last id and the count."""

    def __init__(self, name: str, families: Sequence[str]) -> None:
        self.name = name
        self._kind_family = {k: f for f in families for k in FAMILIES[f]}
        self.ranges: dict[str, dict[str, int]] = {}

    def write(self, events: Sequence[ExportEvent]) -> None:
        for e in events:
            family = self._kind_family.get(e.kind)
            if family is None:
                continue
            r = self.ranges.setdefault(family, {"first_id": e.id, "last_id": e.id, "count": 0})
            r["first_id"] = min(r["first_id"], e.id)
            r["last_id"] = max(r["last_id"], e.id)
            r["count"] += 1


def collect(url: str, announcer: str) -> dict[str, dict[str, Any]]:
    """Move the announcer's cursor over every final event after it; return per family with new events
    its asset event's extra, ``{"first_id", "last_id", "count", "kinds"}``.

    When anything fails after some batches were read (the database went away, turned read-only
    in a failover…), those batches are returned (a warning names the error) instead of raising:
    the cursor will not pass them again, so an error here would leave them never announced. The
    batch whose move was cut off is among them (announced twice if that move did not commit); the
    rest waits for the next run. Two collects at once (two ``after_send`` of overlapping runs):
    the second returns nothing, the first announces (``export_cursor_try_lock``).

    :param announcer: a key of :data:`ANNOUNCERS`.
    :raises KeyError: unknown announcer.
    :raises outreach.db.OutreachDBError: the database cannot be reached before any batch was read
        (``psycopg.OperationalError`` when it dropped during the first read)."""
    from outreach import db
    from outreach.store.exports import export_cursor_try_lock

    families = ANNOUNCERS[announcer]
    target = _Collect(cursor_name(announcer), families)
    with db.connect(url, autocommit=True) as guard:
        if not export_cursor_try_lock(guard, target=target.name):
            log.info("another run is announcing %s; it announces these events", target.name)
            return {}
        _collect_locked(url, target)
    return {f: {**target.ranges[f], "kinds": list(FAMILIES[f])}
            for f in families if f in target.ranges}


def _collect_locked(url: str, target: _Collect) -> None:
    """:func:`collect`'s reading, its lock held."""
    from outreach.export import export

    try:
        export(url, target, batch=BATCH)
    except Exception as exc:
        if not target.ranges:
            raise
        log.warning("%s after %s event(s) of %s were read; announcing those, the rest waits for "
                    "the next run: %s", type(exc).__name__,
                    sum(r["count"] for r in target.ranges.values()), target.name, exc)
