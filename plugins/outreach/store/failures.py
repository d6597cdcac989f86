"""Typed calls of ``sql/queries/failures.sql``, one function per query, named like it.

Delivery failures (:mod:`outreach.bounces`): one row per failed recipient of one email, whatever
reported it; the table's rules are in migration 0091.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from outreach.store._run import Conn, execute, many, maybe_value, one_value


def failure_lock(conn: Conn, *, key: str) -> None:
    """``failure_lock``: serialise the rules about ``key`` (an address, a sending domain) until
    the transaction ends."""
    execute(conn, "failure_lock", {"key": key})


def failure_record(conn: Conn, *, source: str, email_id: int | None, mailbox_id: int | None,
                   address: str, reason: str, owner: str, status: str | None,
                   diagnostic: str | None, now: dt.datetime | None) -> int | None:
    """``failure_record``: the record that decides who applies the effect.

    ``None`` when the same source, or the same (email, address), was recorded before."""
    return cast("int | None", maybe_value(conn, "failure_record", {
        "source": source, "email_id": email_id, "mailbox_id": mailbox_id, "address": address,
        "reason": reason, "owner": owner, "status": status, "diagnostic": diagnostic,
        "now": now}, "id"))


def failure_mark_email(conn: Conn, *, email_id: int, reason: str, status: str | None,
                       diagnostic: str | None) -> None:
    """``failure_mark_email``: the reason, status and diagnostic of the email's failure."""
    execute(conn, "failure_mark_email", {"email_id": email_id, "reason": reason,
                                         "status": status, "diagnostic": diagnostic})


def failure_soft_days(conn: Conn, *, address: str, window: dt.timedelta,
                      now: dt.datetime | None) -> int:
    """``failure_soft_days``: different UTC days with a transient failure of ``address`` in the
    window up to now."""
    return cast("int", one_value(conn, "failure_soft_days",
                                 {"address": address, "window": window, "now": now}, "days"))


@dataclass(frozen=True, slots=True)
class BlockCount:
    """A row of ``failure_block_counts`` (columns as the query names them)."""

    id: int
    address: str
    status: str
    since: dt.datetime
    domain: str
    blocks: int
    authfailures: int
    domain_blocks: int
    domain_authfailures: int


def failure_block_counts(conn: Conn, *, mailbox_id: int, window: dt.timedelta,
                         now: dt.datetime | None) -> list[BlockCount]:
    """``failure_block_counts``: the block rule's figures for every mailbox of the sending domain
    of ``mailbox_id``."""
    return many(conn, "failure_block_counts",
                {"mailbox_id": mailbox_id, "window": window, "now": now}, BlockCount)


@dataclass(frozen=True, slots=True)
class Failure:
    """A row of ``failure_list_for_address`` (columns as the query names them)."""

    id: int
    source: str
    email_id: int | None
    reason: str
    owner: str
    status: str | None
    diagnostic: str | None
    occurred_at: dt.datetime


def failure_list_for_address(conn: Conn, *, address: str) -> list[Failure]:
    """``failure_list_for_address``: every failure of an address, oldest first."""
    return many(conn, "failure_list_for_address", {"address": address}, Failure)
