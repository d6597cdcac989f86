"""The warehouse export (issue 26, item 3): the event log copied out incrementally, in bounded
batches, to a SQL table and/or JSON-lines files (ObjectStoragePath).

Each target's cursor (0131) moves by plan, write, advance, each guarded, over final events only
(below ``pg_snapshot_xmin``, 0104): a killed run rewrites the planned batch, no gap, no second
copy. No Airflow here (:mod:`outreach.airflow.tasks_export`); rows leave as ids, nothing to mask. How
and why: docs/howto/warehouse-export.md."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from outreach import db, failpoints
from outreach.logutil import log
from outreach.paths import sql_dir
from outreach.store import exports as store
from outreach.store.exports import ExportEvent

TIMELINE_KINDS = ("sent", "replied", "auto_replied", "bounced", "unconfirmed", "resolved")
"""The kinds that name an email (``email_id`` set) and get a time column in the read model
``outreach_email_timeline`` (``<kind>_at``: the earliest such event)."""


class Target(Protocol):
    """Where batches go. ``name`` is the cursor's name (``outreach.export_cursors.target``)."""

    name: str

    def write(self, events: Sequence[ExportEvent]) -> None:
        """Write one batch so that it is durable when this returns; writing the same batch again
        must change nothing."""


@dataclass(frozen=True)
class ExportResult:
    """What one :func:`export` did for one target: batches and events written (a replayed
    planned batch counts), and whether the first batch was one a killed run had planned."""

    target: str
    batches: int
    events: int
    resumed: bool

    def line(self) -> str:
        """The run's one summary line for the task log."""
        return (f"export {self.target}: {self.events} event(s) in {self.batches} batch(es)"
                + (" (resumed a batch a stopped run had planned)" if self.resumed else ""))


def export(url: str, target: Target, *, batch: int, max_batches: int | None = None,
           ) -> ExportResult:
    """Copy the final events the target does not have yet, batch by batch.

    :param target: where the batches go (:class:`SqlTarget`, :class:`FileTarget`).
    :param batch: events per batch (the read, the write and the file are bounded by it).
    :param max_batches: stop after this many batches (``None``: until no final event is left).
    :raises ValueError: ``batch`` or ``max_batches`` is below 1.
    :raises outreach.db.OutreachDBError: the outreach database cannot be reached, or the target's
        name breaks ``outreach_export_cursors_target_check``.
    :raises Exception: whatever the target raises; the cursor then stays where it was and the
        next run writes the planned batch again.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be at least 1, got {max_batches}")
    with db.transaction(url) as conn:
        store.export_cursor_ensure(conn, target=target.name)
    batches = events = 0
    resumed = False
    while max_batches is None or batches < max_batches:
        with db.transaction(url) as conn:
            cur = store.export_cursor_get(conn, target=target.name)
            if cur.planned_xact is not None and cur.planned_id is not None:
                rows = store.export_events_planned(
                    conn, after_xact=cur.done_xact, after_id=cur.done_id,
                    upto_xact=cur.planned_xact, upto_id=cur.planned_id)
                upto = (cur.planned_xact, cur.planned_id)
                resumed = resumed or batches == 0
            else:
                rows = store.export_events_next(conn, after_xact=cur.done_xact,
                                                after_id=cur.done_id, batch=batch)
                if not rows:
                    break
                upto = (rows[-1].xact, rows[-1].id)
                if not store.export_cursor_plan(conn, target=target.name,
                                                after_xact=cur.done_xact, after_id=cur.done_id,
                                                upto_xact=upto[0], upto_id=upto[1]):
                    continue  # another run planned or moved it: read the cursor again
        if rows:
            target.write(rows)
        failpoints.hit("export_after_write")
        with db.transaction(url) as conn:
            advanced = store.export_cursor_advance(
                conn, target=target.name, after_xact=cur.done_xact, after_id=cur.done_id,
                upto_xact=upto[0], upto_id=upto[1], count=len(rows))
        if advanced:
            batches += 1
            events += len(rows)
    result = ExportResult(target.name, batches, events, resumed)
    log.info(result.line())
    return result


def event_record(event: ExportEvent) -> dict[str, Any]:
    """The event as it leaves the database (a JSON object; ``occurred_at`` ISO 8601 in UTC).
    The transaction id stays inside: it is the export's bookkeeping, not the event's."""
    return {"event_id": event.id, "kind": event.kind,
            "occurred_at": event.occurred_at.astimezone(dt.UTC).isoformat(), "campaign_id": event.campaign_id,
            "lead_id": event.lead_id, "email_id": event.email_id, "payload": event.payload}


def batch_file_name(events: Sequence[ExportEvent]) -> str:
    """``events-<lowest id>-<highest id>.jsonl`` (ids zero-padded to 19 digits, so names sort).

    Two batches never share their lowest id (each event is in one batch), and a replayed batch
    is the same events, hence the same name.

    :raises ValueError: ``events`` is empty.
    """
    if not events:
        raise ValueError("an empty batch has no file")
    ids = [e.id for e in events]
    return f"events-{min(ids):019d}-{max(ids):019d}.jsonl"


class FileTarget:
    """JSON lines, one file per batch under ``root`` (an ``ObjectStoragePath``, or any path object
    with ``/`` and ``open("wb")``). A retry overwrites the same file with the same bytes. One
    PUT per file on object stores, so a reader never sees half a file there; on ``file://`` a
    killed write can leave a partial file, which the retry of its batch overwrites."""

    def __init__(self, name: str, root: Any) -> None:
        self.name = name
        self.root = root

    def write(self, events: Sequence[ExportEvent]) -> None:
        """Write the batch's file (see the class)."""
        body = "".join(json.dumps(event_record(e), sort_keys=True, separators=(",", ":")) + "\n"
                       for e in events).encode("utf-8")
        with (self.root / batch_file_name(events)).open("wb") as out:
            out.write(body)


def timeline_rows(events: Iterable[ExportEvent]) -> list[tuple[Any, ...]]:
    """The read-model rows a batch gives, one per email: ``(email_id, campaign_id, lead_id,
    <kind>_at for each of TIMELINE_KINDS…, first_event_id)``, earliest time per kind."""
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.email_id is None:
            continue
        row = rows.setdefault(e.email_id, {"campaign_id": e.campaign_id, "lead_id": e.lead_id,
                                           "first": e.id})
        row["first"] = min(row["first"], e.id)
        if e.kind in TIMELINE_KINDS and (row.get(e.kind) is None or e.occurred_at < row[e.kind]):
            row[e.kind] = e.occurred_at
    return [(email_id, r["campaign_id"], r["lead_id"], *(r.get(k) for k in TIMELINE_KINDS),
             r["first"]) for email_id, r in sorted(rows.items())]


class SqlTarget:
    """Tables ``outreach_events`` and ``outreach_email_timeline`` (``sql/warehouse/warehouse.sql``)
    behind a DB-API connection, one transaction per batch (events ``ON CONFLICT DO NOTHING``).

    :param name: the cursor's name.
    :param connect: returns a new DB-API 2 connection (closed after each batch).
    :param placeholder: the driver's positional placeholder (``%s``; ``?`` for SQLite)."""

    def __init__(self, name: str, connect: Callable[[], Any], placeholder: str = "%s") -> None:
        self.name = name
        self._connect = connect
        self._sql = {k: v.replace("%s", placeholder)
                     for k, v in db.load_queries(sql_dir() / "warehouse").items()}
        self._created = False

    def write(self, events: Sequence[ExportEvent]) -> None:
        """Write the batch and commit (see the class); roll back on any error."""
        conn = self._connect()
        try:
            cur = conn.cursor()
            if not self._created:
                cur.execute(self._sql["warehouse_events_create"])
                cur.execute(self._sql["warehouse_email_timeline_create"])
            cur.executemany(self._sql["warehouse_event_insert"], [
                (e.id, e.kind, e.occurred_at, e.campaign_id, e.lead_id, e.email_id,
                 json.dumps(e.payload, sort_keys=True)) for e in events])
            timeline = timeline_rows(events)
            if timeline:
                cur.executemany(self._sql["warehouse_email_timeline_upsert"], timeline)
            conn.commit()
            self._created = True
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()
