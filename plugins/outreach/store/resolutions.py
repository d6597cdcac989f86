"""Typed calls of ``sql/queries/resolutions.sql``, one function per query, named like it.

Operator decisions: resolving unconfirmed emails (each statement guarded by status = 'failed'
AND failure_kind = 'unconfirmed', so resolving twice changes nothing), and requeuing emails
whose attempts were exhausted without ever being accepted (guarded by failure_kind
'retries_exhausted').
"""

from __future__ import annotations

from typing import cast

from outreach.store._run import Conn, execute, values


def resolution_begin(conn: Conn) -> None:
    """``resolution_begin``: Declares this transaction an operator resolution (checked by the
    emails_guard_unconfirmed trigger); SET LOCAL ends with the transaction."""
    execute(conn, "resolution_begin", {})


def resolution_insert(
    conn: Conn, *, evidence: str | None, email_id: int, decision: str, resolved_by: str, note: str
) -> list[int]:
    """``resolution_insert``: %(evidence)s: what the operator was shown besides Sent Items (a late
    acceptance), or NULL."""
    return cast(
        "list[int]",
        values(
            conn,
            "resolution_insert",
            {
                "evidence": evidence,
                "email_id": email_id,
                "decision": decision,
                "resolved_by": resolved_by,
                "note": note,
            },
            "id",
        ),
    )
