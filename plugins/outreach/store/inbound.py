"""Typed calls of ``sql/queries/inbound.sql``, one function per query, named like it.

Inbound messages (outreach.inbox): the table's rules are in migration 0011. Each message is one
transaction: match it (the email_/lead_ queries below), record it (inbound_insert, which decides
who applies the effect), apply the effect, set the effect text, advance the cursor.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import cast

from outreach.store._run import Conn, many, maybe_value, one_value, values


@dataclass(frozen=True, slots=True)
class InboundTarget:
    """A row of ``inbound_targets`` (columns as the query names them)."""

    id: int
    address: str
    imap_conn_id: str | None
    unsubscribe_imap_conn_id: str | None


def inbound_targets(conn: Conn) -> list[InboundTarget]:
    """``inbound_targets``: Every mailbox with an IMAP account to read, and the shared unsubscribe
    accounts."""
    return many(conn, "inbound_targets", {}, InboundTarget)


def inbound_cursor_get(conn: Conn, *, account: str, folder: str, uidvalidity: int) -> int | None:
    """``inbound_cursor_get``: runs inbound_cursor_get.

    ``None`` when no row matched."""
    return cast(
        "int | None",
        maybe_value(
            conn,
            "inbound_cursor_get",
            {"account": account, "folder": folder, "uidvalidity": uidvalidity},
            "last_uid",
        ),
    )


def inbound_cursor_advance(
    conn: Conn, *, account: str, folder: str, uidvalidity: int, uid: int
) -> list[int]:
    """``inbound_cursor_advance``: Only upwards: a reader that finishes late never moves the cursor
    back."""
    return cast(
        "list[int]",
        values(
            conn,
            "inbound_cursor_advance",
            {"account": account, "folder": folder, "uidvalidity": uidvalidity, "uid": uid},
            "last_uid",
        ),
    )


def inbound_first_send(conn: Conn, *, mailbox_ids: list[int] | None) -> dt.datetime | None:
    """``inbound_first_send``: when the mailboxes read from an account first sent anything."""
    return cast(
        "dt.datetime | None",
        one_value(conn, "inbound_first_send", {"mailbox_ids": mailbox_ids}, "first_send"),
    )


def inbound_insert(
    conn: Conn,
    *,
    account: str,
    folder: str,
    uidvalidity: int,
    uid: int,
    mailbox_id: int | None,
    message_id: str,
    from_address: str,
    subject: str,
    class_: str,
    evidence: str,
    email_id: int | None,
    lead_id: int | None,
    address: str | None,
    dsn_status: str | None,
    received_at: dt.datetime | None,
    reason: str | None = None,
    diagnostic: str | None = None,
) -> int | None:
    """``inbound_insert``: the record that decides who applies the effect (``None``: already recorded)."""
    return cast(
        "int | None",
        maybe_value(
            conn,
            "inbound_insert",
            {
                "account": account,
                "folder": folder,
                "uidvalidity": uidvalidity,
                "uid": uid,
                "mailbox_id": mailbox_id,
                "message_id": message_id,
                "from_address": from_address,
                "subject": subject,
                "class": class_,
                "evidence": evidence,
                "email_id": email_id,
                "lead_id": lead_id,
                "address": address,
                "dsn_status": dsn_status,
                "received_at": received_at,
                "reason": reason,
                "diagnostic": diagnostic,
            },
            "id",
        ),
    )


def inbound_set_effect(conn: Conn, *, effect: str, id: int) -> list[int]:
    """``inbound_set_effect``: runs inbound_set_effect."""
    return cast("list[int]", values(conn, "inbound_set_effect", {"effect": effect, "id": id}, "id"))


@dataclass(frozen=True, slots=True)
class InboundEffect:
    """A row of ``inbound_effect_list`` (columns as the query names them)."""

    id: int
    class_: str
    evidence: str
    effect: str
    account: str
    address: str


def inbound_effect_list(conn: Conn) -> list[InboundEffect]:
    """``inbound_effect_list``: Every inbound message recorded, oldest first, with the lead it
    concerned (the demo's report)."""
    return many(conn, "inbound_effect_list", {}, InboundEffect)


@dataclass(frozen=True, slots=True)
class ReplyNotice:
    """A row of ``inbound_reply_notices``: what a reply notice says about one reply event
    (``None`` where the lead, campaign, email or message was erased)."""

    event_id: int
    lead: str | None
    campaign: str | None
    step: int | None
    mailbox_label: str | None
    mailbox_display_name: str | None
    mailbox_address: str | None
    subject: str | None
    account: str | None
    folder: str | None
    uidvalidity: int | None
    uid: int | None


def inbound_reply_notices(conn: Conn, *, event_ids: list[int]) -> list[ReplyNotice]:
    """``inbound_reply_notices``: the reply events among ``event_ids`` with their lead,
    campaign, step, mailbox, subject and place in the mailbox, in event order."""
    return many(conn, "inbound_reply_notices", {"event_ids": event_ids}, ReplyNotice)
