"""Typed calls of ``sql/queries/audit_logs.sql``, one function per query, named like it.

The audit trail (``outreach.audit_log``, migration 0128): append-only rows of operator decisions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, cast

from outreach.store._run import Conn, many, one_value


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One row of ``outreach.audit_log`` (``at`` UTC-aware; ``details`` a dict)."""

    id: int
    at: dt.datetime
    actor: str
    via: str
    action: str
    target_kind: str
    target_key: str | None
    target_id: int | None
    campaign_key: str | None
    reason: str | None
    details: dict[str, Any]
    dag_id: str | None
    run_id: str | None


def audit_log_insert(
    conn: Conn,
    *,
    actor: str,
    via: str,
    action: str,
    target_kind: str,
    target_key: str | None,
    target_id: int | None,
    campaign_key: str | None,
    reason: str | None,
    details: Any,
    dag_id: str | None,
    run_id: str | None,
) -> int:
    """``audit_log_insert``: Record one decision; ``details`` is jsonb (wrapped in
    ``psycopg.types.json.Jsonb``: ids and counts, never a full address)."""
    return cast(
        "int",
        one_value(
            conn,
            "audit_log_insert",
            {
                "actor": actor,
                "via": via,
                "action": action,
                "target_kind": target_kind,
                "target_key": target_key,
                "target_id": target_id,
                "campaign_key": campaign_key,
                "reason": reason,
                "details": details,
                "dag_id": dag_id,
                "run_id": run_id,
            },
            "id",
        ),
    )


def audit_log_list(
    conn: Conn, *, campaign_key: str | None, since: dt.datetime | None, limit: int
) -> list[AuditRow]:
    """``audit_log_list``: The decisions of one campaign (``campaign_key`` ``None``: all), at or
    after ``since`` (``None``: any time), newest first, at most ``limit``."""
    return many(
        conn,
        "audit_log_list",
        {"campaign_key": campaign_key, "since": since, "limit": limit},
        AuditRow,
    )
