"""Claiming rows to send: the one claim of a mailbox's due rows within its quota, the gap's clock,
and the live sender's heartbeat on its claim (see :mod:`outreach.send`, which runs them).
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outreach import db, failpoints
from outreach.logutil import log, mailbox_name, mask
from outreach.store import Conn, emails, mailboxes


def worker_name(label: str = "cli") -> str:
    """Return ``label@host:pid``, recorded as ``claimed_by``."""
    import os

    return f"{label}@{socket.gethostname()}:{os.getpid()}"


MESSAGE_CLASSES = ("marketing", "transactional")


@dataclass
class Clock:
    """How a sender waits for a row's reserved handoff moment (the gap, see :func:`claim`):
    ``now()`` returns an aware datetime, ``sleep(seconds)`` waits. Injectable, so tests check the
    gap without sleeping; the default is the real clock."""

    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    sleep: Callable[[float], None] = time.sleep

    def wait_until(self, moment: dt.datetime | None, longest: dt.timedelta) -> float:
        """Sleep until ``moment`` (``None``: not at all), never longer than ``longest`` (a
        reservation further away than the claim horizon means the clocks disagree); return the
        seconds slept."""
        if moment is None:
            return 0.0
        seconds = min((moment - self.now()).total_seconds(), longest.total_seconds())
        if seconds <= 0:
            return 0.0
        self.sleep(seconds)
        return seconds


def claim(conn: Conn, mailbox_id: int, limit: int, *, worker: str, now: dt.datetime | None = None,
          interval: dt.timedelta | None = None, message_class: str = "marketing",
          gap_seconds: float = 0.0, gap_jitter: float = 0.0,
          gap_horizon: dt.timedelta = dt.timedelta(minutes=15),
          person_per_day: int | None = None, person_per_week: int | None = None,
          company_per_day: int | None = None, provider_hourly: dict[str, int] | None = None,
          ) -> tuple[list[dict[str, Any]], str]:
    """Claim up to ``limit`` due rows of one mailbox within its quota, in one transaction.

    Marketing: under the mailbox lock, one claim takes at most the daily limit and, with
    ``interval``, the run's share (``mailbox_remaining_today``); the contact policy and provider caps
    hold rows back with a ``hold_reason`` (``outreach.claim_emails_v4``). With ``gap_seconds`` > 0
    each row gets ``row["not_before"]`` (aware, UTC), its reserved handoff moment. Transactional: no
    window, cap, warm-up or gap; a paused mailbox claims nothing.
    Why: docs/explanation/pacing.md, docs/explanation/contact-policy.md.

    :param interval: the send runs' interval for pacing (``None``: no pacing; marketing only).
    :param gap_seconds: least seconds between two handoffs of the mailbox; ``gap_jitter`` a fraction.
    :param gap_horizon: how far ahead handoffs may be reserved.
    :param person_per_day: and ``person_per_week``, ``company_per_day``: caps, ``None`` off.
    :param provider_hourly: ``{"microsoft": 20}`` rows an hour per provider; ``None``/empty: off.
    :returns: ``(rows, note)``; ``note`` says why nothing was claimed ("paused", "daily cap", …)
        or what the claim held back (:func:`held_note`).
    :raises ValueError: an unknown message class."""
    if message_class == "transactional":
        rows = db.run(conn, "email_claim_transactional", {
            "mailbox_id": mailbox_id, "limit": limit, "now": now,
            "claim_token": uuid.uuid4(), "claimed_by": worker})
        if rows:
            failpoints.hit("after_claim")
        return rows, ""
    if message_class != "marketing":
        raise ValueError(f"message_class must be one of {MESSAGE_CLASSES}, got {message_class!r}")
    with conn.transaction():
        locked = mailboxes.mailbox_lock(conn, mailbox_id=mailbox_id)
        if locked is None:
            return [], "unknown mailbox"
        if locked.status != "active":
            return [], "mailbox paused"
        quota = mailboxes.mailbox_remaining_today(
            conn, mailbox_id=mailbox_id, now=now, interval=interval, gap_seconds=gap_seconds,
            gap_jitter=gap_jitter, horizon=gap_horizon)
        remaining = quota.daily_limit - quota.used
        if remaining <= 0:
            return [], f"daily limit reached ({quota.used}/{quota.daily_limit})"
        if quota.run_left <= 0:
            return [], (f"paced: {quota.slot_used}/{quota.run_share} this run, "
                        f"{quota.used}/{quota.due_by_now} of the day by this run")
        fit = quota.handoff_fit
        if fit is not None and fit <= 0:
            return [], "gap: the mailbox's next handoff is reserved beyond the claim horizon"
        take = min(limit, quota.run_left, fit or limit)
        rows = db.run(conn, "email_claim_batch", {
            "mailbox_id": mailbox_id, "limit": take,
            "now": now, "claim_token": uuid.uuid4(), "claimed_by": worker,
            "person_per_day": person_per_day, "person_per_week": person_per_week,
            "company_per_day": company_per_day,
            "provider_hourly": Jsonb(provider_hourly) if provider_hourly else None})
        held = emails.email_claim_held(conn)
        if rows and fit is not None:
            moments = mailboxes.mailbox_reserve_handoffs(
                conn, mailbox_id=mailbox_id, rows=len(rows), now=now, gap_seconds=gap_seconds,
                gap_jitter=gap_jitter)
            for row, moment in zip(rows, moments, strict=True):
                row["not_before"] = moment.not_before
        if rows:
            failpoints.hit("claim_before_commit")
    if rows:
        failpoints.hit("after_claim")
    return rows, held_note(_held_counts(held))


def _held_counts(setting: str) -> dict[str, Any]:
    """The claim's ``outreach.claim_held`` setting as ``{"held": {reason: rows}, "busy": rows}``
    (``{}`` when unset: an older schema, or nothing to say)."""
    import json

    return json.loads(setting) if setting else {}


HELD_REASONS_SHOWN = 3
"""How many distinct hold reasons a batch's note names (the rest are counted as "other")."""


class ClaimNote(str):
    """The note :func:`claim` returns (a ``str``: why nothing was claimed, or what it held back)
    with ``held``, how many queued rows this claim held back for later (0: none)."""

    held: int

    def __new__(cls, text: str = "", held: int = 0) -> ClaimNote:
        """Return the note ``text`` with ``held`` rows held back."""
        note = super().__new__(cls, text)
        note.held = held
        return note


def held_note(counts: dict[str, Any]) -> ClaimNote:
    """Return the note of a claim from what it held back and skipped (``{"held": {reason: rows},
    "busy": rows}``, the setting ``claim_emails_v4`` leaves, migration 0146):
    ``44 held for later: frequency cap: 1 a day (40); holiday in DE (4)``, with ``held`` = 44,
    and ``; 3 busy: another sender holds the person or their company (still due)`` for rows
    another claimer's lock kept; ``""`` (0) for neither.

    Said in the batch's summary line (``held=44 note=…``) so ``claimed=0`` is never left
    unexplained when the contact policy, a provider cap or the calendar decided it; each claim
    counts only what it did itself (docs/explanation/contact-policy.md)."""
    held = sorted((counts.get("held") or {}).items(), key=lambda kv: (-int(kv[1]), kv[0]))
    busy = int(counts.get("busy") or 0)
    total = sum(int(n) for _, n in held)
    text = ""
    if held:
        parts = [f"{reason} ({n})" for reason, n in held[:HELD_REASONS_SHOWN]]
        rest = sum(int(n) for _, n in held[HELD_REASONS_SHOWN:])
        if rest:
            parts.append(f"other reasons ({rest})")
        text = f"{total} held for later: {'; '.join(parts)}"
    if busy:
        text += ("; " if text else "") + f"{busy} busy: another sender holds the person or their company (still due)"
    return ClaimNote(text, total)


def message_class(row: dict[str, Any]) -> str:
    """Return a claimed row's message class: ``marketing`` unless the row says otherwise (both
    claim queries return it; a row built by hand, as the benchmarks do, may leave it out)."""
    return str(row.get("message_class", "marketing"))


def describe(row: dict[str, Any]) -> str:
    """Return how logs name a claimed row: its id, the masked recipient, its step (marketing)
    or template (transactional) and its mailbox by name (:func:`outreach.logutil.mailbox_name`);
    never the full address."""
    what = (f"step {row['step_position']}" if message_class(row) == "marketing"
            else f"transactional {row['template']}")
    mailbox = mailbox_name(row.get("mailbox_label"), row.get("mailbox_name"),
                           row.get("mailbox_address"))
    return f"email {row['id']} ({mask(row['email'])}, {what}, mailbox {mailbox})"


class ClaimHeartbeat:
    """The live sender's heartbeat on one claim: a daemon thread beating ``email_heartbeat_claim``.

    So the reaper's short release requeues a dead sender's unstamped rows within minutes, never a
    live one's. A failed beat is logged and retried; safety never depends on it.

    :param rows: the claimed rows (``id`` and ``claim_token``; one claim, one token).
    :param interval: seconds between two beats (``Settings.heartbeat_interval``)."""

    def __init__(self, url: str, rows: Sequence[dict[str, Any]], interval: float,
                 now: dt.datetime | None = None) -> None:
        self._url, self._interval, self._now = url, interval, now
        self._ids = [int(r["id"]) for r in rows]
        self._token = rows[0]["claim_token"] if rows else None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outreach-claim-heartbeat",
                                        daemon=True)

    def start(self) -> ClaimHeartbeat:
        """Start beating (nothing when the claim is empty); return self."""
        if self._ids and self._token is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and wait for the thread (at most one beat's statement)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        conn: Conn | None = None
        token = self._token
        assert token is not None
        try:
            while not self._stopped.wait(self._interval):
                try:
                    conn = conn or db.connect(self._url, autocommit=True)
                    if not emails.email_heartbeat_claim(conn, now=self._now, ids=self._ids,
                                                        claim_token=token):
                        return  # every row stamped, finished or taken: nothing left to keep
                except (psycopg.Error, db.OutreachDBError) as exc:
                    log.warning("claim heartbeat of %s row(s) failed (next try in %s s): %s",
                                len(self._ids), self._interval, _first_line(exc))
                    if conn is not None:
                        conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
