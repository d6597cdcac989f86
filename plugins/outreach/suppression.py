"""Suppressions: add them (one by one, from a do-not-contact CSV, or by a one-click unsubscribe),
remove them (with who and why), and cancel what they stop.

Whether an address is suppressed is decided only by the SQL function ``outreach.is_suppressed``;
this module only writes suppressions. Adding one cancels the queued steps of the addresses it
covers in the same transaction. Every addition and removal is recorded in
``outreach.suppression_events`` by a trigger (migration 0003), so nothing is lost.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from email_validator import EmailNotValidError

from outreach import audit, db
from outreach.addresses import normalize_address
from outreach.leadcheck import Problem
from outreach.leadfile import BoundedLines, import_path, open_regular
from outreach.logutil import mask
from outreach.store import Conn, emails, suppressions

REASONS = ("unsubscribed", "bounced", "complained", "manual", "do-not-contact")


@dataclass
class SuppressionImport:
    """Outcome of a do-not-contact import: ``added``, ``known`` (already there), ``invalid``,
    ``cancelled`` queued emails, and the ``problems`` by line (``unit``: ``line`` of a file,
    ``row`` of a query's result)."""

    file: str
    added: int = 0
    known: int = 0
    invalid: int = 0
    cancelled: int = 0
    problems: list[Problem] = field(default_factory=list)
    unit: str = "line"

    def problem_lines(self, limit: int = 100) -> list[str]:
        """The first ``limit`` problems as ``<file>, <unit> N, field F: reason (row skipped)``."""
        return [f"{self.file}, {self.unit} {p.line}, field {p.field}: {p.reason} (row skipped)"
                for p in self.problems[:limit]]


def parse_entry(value: str) -> tuple[str, str]:
    """Turn ``"jane@acme.com"`` into ``("address", …)`` and ``"@acme.com"``/``"acme.com"`` into
    ``("domain", "acme.com")``, in the leads' normal form (an IDN in Unicode).

    :raises ValueError: neither a valid address nor a plausible domain."""
    value = value.strip()
    if "@" in value.lstrip("@"):
        try:
            return "address", normalize_address(value)
        except EmailNotValidError as exc:
            raise ValueError(f"invalid address: {exc}") from None
    domain = value.lstrip("@").rstrip(".")
    if "." not in domain or " " in domain:
        raise ValueError(f"not an address or a domain: {value!r}")
    try:
        return "domain", normalize_address(f"x@{domain}").rpartition("@")[2]
    except EmailNotValidError:
        raise ValueError(f"not an address or a domain: {value!r}") from None


def suppress(conn: Conn, value: str, reason: str, source: str, *, actor: str | None = None,
             who: audit.Who | None = None) -> tuple[bool, int]:
    """Suppress an address or domain inside the caller's transaction.

    :param actor: who did it, recorded in ``outreach.suppression_events`` (needs a transaction).
    :param who: an operator's decision, also recorded in the audit trail; ``None`` for an
        unsubscribe, a bounce or a complaint.
    :returns: ``(added, cancelled)``: whether it was new, and how many queued emails it cancelled.
    :raises ValueError: bad value or unknown reason (one of :data:`REASONS`)."""
    if reason not in REASONS:
        raise ValueError(f"unknown reason {reason!r}; one of {REASONS}")
    kind, norm = parse_entry(value)
    if actor:
        suppressions.suppression_actor_set(conn, actor=actor, note="")
    new = suppressions.suppression_insert(conn, kind=kind, value=norm, reason=reason, source=source)
    added = bool(new)
    cancelled = len(emails.email_cancel_suppressed(conn)) if added else 0
    if added and who is not None:
        audit.record_as(conn, who, by=actor, action="suppress", target_kind="suppression",
                        target_key=_key(kind, norm), target_id=new[0], reason=reason,
                        details={"kind": kind, "cancelled": cancelled, "source": source})
    return added, cancelled


def _key(kind: str, value: str) -> str:
    """How the audit trail names a suppression: a domain as is, an address masked."""
    return mask(value) if kind == "address" else value


def _rows(reader: Iterator[list[str]], lines: BoundedLines) -> Iterator[list[str]]:
    """The records of ``reader``, each counted against the row limit on its own."""
    while True:
        lines.new_row()
        record = next(reader, None)
        if record is None:
            return
        yield record


VALUE_HEADERS = ("email", "email address", "domain", "address", "value")
"""The header names of the column a do-not-contact list's entries are read from (case and outer
spaces ignored); without one of them, the first column (and a file's first line is an entry)."""


def value_column(header: list[str]) -> int | None:
    """Return the index of the entry column of a do-not-contact list's ``header`` (one of
    :data:`VALUE_HEADERS`), or ``None``."""
    names = [str(h).strip().lower() for h in header]
    return next((i for i, h in enumerate(names) if h in VALUE_HEADERS), None)


def apply_entries(conn: Conn, entries: Iterable[tuple[int, str, str]], result: SuppressionImport,
                  *, reason: str, source: str, who: audit.Who | None = None) -> SuppressionImport:
    """The one import path of do-not-contact ``(row, field, value)`` entries, in the caller's transaction.

    Each is parsed and inserted once (a known one counted ``known``), a bad one counted ``invalid``
    and reported while the rest goes on; then the queued emails they suppress are cancelled.

    :param reason: one of :data:`REASONS`.
    :param who: as for :func:`suppress`: one audit row naming ``source`` and the counts.
    :returns: ``result``, its counts increased.
    :raises ValueError: unknown reason."""
    if reason not in REASONS:
        raise ValueError(f"unknown reason {reason!r}; one of {REASONS}")
    before = (result.added, result.known, result.invalid, result.cancelled)
    for line, name, value in entries:
        if not value.strip():
            continue
        try:
            kind, norm = parse_entry(value)
        except ValueError as exc:
            result.invalid += 1
            result.problems.append(Problem(line, name, str(exc)))
            continue
        if suppressions.suppression_insert(conn, kind=kind, value=norm, reason=reason,
                                           source=source):
            result.added += 1
        else:
            result.known += 1
    result.cancelled += len(emails.email_cancel_suppressed(conn))
    added, known, invalid, cancelled = (now - was for now, was in zip(
        (result.added, result.known, result.invalid, result.cancelled), before, strict=True))
    if added and who is not None:
        audit.record_as(conn, who, action="suppress", target_kind="suppression",
                        target_key=source, reason=reason,
                        details={"bulk": True, "added": added, "known": known, "invalid": invalid,
                                 "cancelled": cancelled})
    return result


def csv_entries(f: IO[str], label: str | Path) -> Iterator[tuple[int, str, str]]:
    """The ``(line, field, value)`` entries of a do-not-contact CSV opened with ``newline=""``
    (first column, or a column named as :data:`VALUE_HEADERS`), for :func:`apply_entries`.

    :raises ImportFileError: (while iterating) a row longer than
        :data:`outreach.leadfile.MAX_ROW_CHARS` (``label`` named).
    """
    lines = BoundedLines(f, label)  # rows of at most MAX_ROW_CHARS: read in bounded memory
    reader = csv.reader(lines)
    first = next(reader, None)
    if first is None:
        return
    header = [h.strip().lower() for h in first]
    col = value_column(first)
    body: Iterator[tuple[int, list[str]]] = (
        (reader.line_num, record) for record in _rows(reader, lines))
    if col is None:
        body = itertools.chain([(1, first)], body)
    col = col or 0
    for line, record in body:
        if record and col < len(record):
            yield line, header[col] if header else "value", record[col]


def import_suppressions(url: str, csv_file: str | Path, reason: str = "do-not-contact",
                        who: audit.Who | None = None) -> SuppressionImport:
    """Import a do-not-contact CSV in one transaction through :func:`apply_entries`.

    :param csv_file: inside an import folder (:func:`outreach.leadfile.import_path`).
    :param who: who runs it, for the audit trail.
    :raises ImportFileError: outside the import folders, not a regular file, or a row over
        :data:`outreach.leadfile.MAX_ROW_CHARS` (nothing imported).
    :raises OSError: the file cannot be read."""
    path = import_path(csv_file)
    result = SuppressionImport(file=str(csv_file))
    with open_regular(path, "r", encoding="utf-8-sig", newline="") as f, \
            db.transaction(url) as conn:
        return apply_entries(conn, csv_entries(f, csv_file), result, reason=reason,
                             source=str(csv_file), who=who)


def is_suppressed(conn: Conn, address: str, message_class: str = "marketing") -> bool:
    """Ask the one SQL function whether ``address`` is suppressed for ``message_class``
    (``marketing``: any suppression; ``transactional``: hard bounces, manual blocks and
    do-not-contact entries, not marketing unsubscribes or complaints — migration 0006)."""
    return bool(suppressions.suppression_check(conn, address=address, message_class=message_class))


@dataclass(frozen=True)
class Unsuppressed:
    """Outcome of :func:`unsuppress`: ``kind``/``value`` as stored, whether a suppression was
    ``removed``, the ``reason`` it had (``None`` when there was none), and whether the address is
    ``still_suppressed`` (for example by a whole-domain suppression)."""

    kind: str
    value: str
    removed: bool
    reason: str | None
    still_suppressed: bool


def unsuppress(conn: Conn, value: str, *, actor: str, note: str,
               who: audit.Who | None = None) -> Unsuppressed:
    """Remove the active suppression of an address or domain inside the caller's transaction.

    Recorded in ``outreach.suppression_events`` and the audit trail; emails it cancelled stay
    cancelled: unsuppressing never sends anything by itself.

    :param actor: who is doing it (non-empty).
    :param note: why (non-empty), for example a ticket reference.
    :param who: who is authenticated; default ``actor`` through ``api``.
    :raises ValueError: bad value, or an empty ``actor`` or ``note``."""
    if not actor.strip() or not note.strip():
        raise ValueError("an unsuppress needs who (--by) and why (--reason)")
    kind, norm = parse_entry(value)
    suppressions.suppression_actor_set(conn, actor=actor.strip(), note=note.strip())
    removed = suppressions.suppression_remove(conn, kind=kind, value=norm)
    still = is_suppressed(conn, norm if kind == "address" else f"x@{norm}")
    if removed is not None:
        audit.record_as(conn, who or audit.Who(actor.strip()), by=actor, action="unsuppress",
                        target_kind="suppression", target_key=_key(kind, norm), target_id=removed.id,
                        reason=note.strip(),
                        details={"kind": kind, "was": removed.reason, "still_suppressed": still})
    return Unsuppressed(kind, norm, removed is not None, removed.reason if removed else None,
                        still)


@dataclass(frozen=True)
class OneClick:
    """Outcome of :func:`unsubscribe_email`: the ``email_id``, the ``address`` suppressed, whether
    the suppression was ``added`` now (``False`` on a repeat) and how many queued emails it
    ``cancelled``."""

    email_id: int
    address: str
    added: bool
    cancelled: int


def unsubscribe_email(conn: Conn, email_id: int, *, source: str | None = None,
                      actor: str = "recipient (one-click)") -> OneClick | None:
    """Suppress the recipient of email row ``email_id`` (``unsubscribed``) and cancel their queued steps.

    In the caller's transaction; repeats are harmless (RFC 8058 §3.2). The inbox takes the same path
    for a mailto carrying the token (``source`` ``mailto:inbound:<id>``).

    :returns: ``None`` when no email row has that id."""
    row = emails.email_unsubscribe_target(conn, email_id=email_id)
    if row is None:
        return None
    added, cancelled = suppress(conn, row.email, "unsubscribed",
                                source or f"one-click:email:{email_id}", actor=actor)
    return OneClick(email_id, row.email, added, cancelled)
