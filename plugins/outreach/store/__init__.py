"""The typed store: every SQL statement the code runs, as a Python function.

One module per file of ``sql/queries/`` (the noun: ``store.emails`` runs ``emails.sql``, whose
queries all start with ``email_``), one function per named query, named like it: ``conn``
first, keyword parameters typed as the statement takes them. A function returns a frozen
dataclass per row (``store.emails.ClaimedEmail``, ``store.mailboxes.MailboxQuota``, …), one
column's value, or nothing. A row that must exist raises :class:`RowMissing`; a row that may be
missing is ``None`` (the function's return type says which). The SQL stays in the ``.sql`` files
(loaded by :mod:`outreach.db`); tests/unit/test_query_names.py checks that every query is used and
every name used exists.
"""

from __future__ import annotations

from outreach.store._run import Conn, RowMissing

__all__ = ["Conn", "RowMissing"]
