"""The connector: psycopg connections, the named-query registry and the error mapping.

Every SQL statement the code runs lives in ``sql/queries/*.sql`` under a ``-- name: <name>``
header (procrastinate/River style); Python never builds SQL strings. :func:`load_queries` loads them
once. Database errors that carry meaning (a unique violation on a named constraint) are turned
into :class:`OutreachDBError` naming the constraint.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from outreach.paths import sql_dir

_NAME = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)


class OutreachDBError(RuntimeError):
    """A database error with the constraint or query it concerns.

    :param message: what went wrong, for people.
    :param constraint: the constraint name when the error is a violation, else ``None``.
    """

    def __init__(self, message: str, constraint: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint


def parse_queries(text: str, source: str = "<string>") -> dict[str, str]:
    """Split a queries file into ``{name: sql}``.

    :param text: the file content, queries separated by ``-- name: <name>`` lines.
    :param source: file name used in error messages.
    :raises ValueError: a name appears twice.
    """
    parts = _NAME.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        out[name] = body.strip().rstrip(";").strip()
    return out


@functools.cache
def load_queries(directory: Path | None = None) -> dict[str, str]:
    """Read every ``*.sql`` file of ``sql/queries`` once into ``{name: sql}``.

    :raises ValueError: a query name is defined in two places.
    """
    directory = directory or sql_dir() / "queries"
    out: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        for name, sql in parse_queries(path.read_text(encoding="utf-8"), str(path)).items():
            if name in out:
                raise ValueError(f"{path}: query {name!r} is already defined in another file")
            out[name] = sql
    return out


def query(name: str) -> str:
    """Return the SQL of the named query.

    :raises KeyError: no query has that name.
    """
    try:
        return load_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries") from None


ERASURE_KEY_VAR = "OUTREACH_ERASURE_KEY"
"""The environment variable holding the erasure key (docs/howto/erasure.md): every session gets it
as the setting ``outreach.erasure_key``, which the suppression rule needs once a person was erased
(migration 0129: without it, or with another key, ``outreach.is_suppressed`` raises)."""


ERASURE_KEY_CHECK_TEXT = b"outreach erasure key check"
"""The fixed text whose HMAC under the key is the key's fingerprint (``outreach.erasure_keys``,
migration 0129)."""


def erasure_key_check(key: str) -> str:
    """Return the session's proof of its key check (0139): hex SHA-256 of the key, then its fingerprint
    (hex HMAC-SHA256 of :data:`ERASURE_KEY_CHECK_TEXT` under the key), both UTF-8.

    It lets ``outreach.erasure_key()`` skip the SQL HMAC and reveals no more than the fingerprint:
    docs/howto/erasure.md.

    :param key: the erasure key (non-empty)."""
    import hashlib
    import hmac

    fingerprint = hmac.new(key.encode(), ERASURE_KEY_CHECK_TEXT, hashlib.sha256).hexdigest()
    return hashlib.sha256((key + fingerprint).encode()).hexdigest()


def session_options(url: str, erasure_key: str | None = None) -> str | None:
    """Return the libpq ``options`` for a session: the URL's own, plus ``-c outreach.erasure_key=…``
    and ``-c outreach.erasure_key_check=…`` when an erasure key is set; ``None``: nothing to pass.

    Passed at connection start, so the key is in no statement (and no statement log).

    :param url: the libpq URL (its ``options``, if any, are kept first).
    :param erasure_key: the key (default :data:`ERASURE_KEY_VAR` of the environment)."""
    import os

    from psycopg.conninfo import conninfo_to_dict

    key = erasure_key if erasure_key is not None else os.environ.get(ERASURE_KEY_VAR, "")
    own = conninfo_to_dict(url).get("options")
    if not key:
        return str(own) if own else None
    escaped = key.replace("\\", "\\\\").replace(" ", "\\ ")
    return " ".join(filter(None, [str(own) if own else "", f"-c outreach.erasure_key={escaped}",
                                  f"-c outreach.erasure_key_check={erasure_key_check(key)}"]))


def libpq_url(url: str) -> str:
    """Return a PostgreSQL URL of any scheme (an Airflow connection's ``postgres://``, a SQLAlchemy
    ``postgresql+psycopg2://``) as the libpq ``postgresql://`` URL psycopg takes; a URL without a
    scheme (a conninfo string) unchanged."""
    return "postgresql://" + url.split("://", 1)[1] if "://" in url else url


def connect(url: str, *, autocommit: bool = False, erasure_key: str | None = None,
            ) -> psycopg.Connection[dict[str, Any]]:
    """Open a psycopg 3 connection returning rows as dicts.

    :param url: a libpq URL (``postgresql://…``).
    :param erasure_key: the erasure key for the session (default: :data:`ERASURE_KEY_VAR` of
        the environment, see :func:`session_options`).
    :raises OutreachDBError: the server cannot be reached (the message never shows the password).
    """
    options = session_options(url, erasure_key)
    extra: dict[str, Any] = {"options": options} if options else {}
    try:
        return psycopg.connect(url, row_factory=dict_row, autocommit=autocommit,
                               application_name="outreach", **extra)
    except psycopg.OperationalError as exc:
        raise OutreachDBError(f"cannot connect to the outreach database: {exc}") from exc


@contextmanager
def transaction(url: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """Yield a connection inside one transaction: committed on success, rolled back on error."""
    conn = connect(url)
    try:
        with conn.transaction():
            yield conn
    finally:
        conn.close()


def run(conn: psycopg.Connection[Any], name: str, params: dict[str, Any] | None = None,
        ) -> list[dict[str, Any]]:
    """Execute the named query and return all its rows (``[]`` when it returns none).

    :raises OutreachDBError: a constraint was violated (``.constraint`` names it).
    """
    try:
        cur = conn.execute(query(name), params if params is not None else {})
    except psycopg.errors.IntegrityError as exc:
        constraint = getattr(exc.diag, "constraint_name", None)
        raise OutreachDBError(f"{name}: {exc.diag.message_primary}", constraint) from exc
    return cur.fetchall() if cur.description else []


def one(conn: psycopg.Connection[Any], name: str, params: dict[str, Any] | None = None,
        ) -> dict[str, Any] | None:
    """Execute the named query and return its first row, or ``None``."""
    rows = run(conn, name, params)
    return rows[0] if rows else None
