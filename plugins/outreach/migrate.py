"""Forward-only, numbered schema migrations (``sql/migrations/NNNN_name.sql``).

``outreach db upgrade`` applies each unrecorded migration in its own transaction with its
record, under an advisory lock (a concurrent upgrade waits, then finds nothing). ``sql/schema.sql``
is the schema they build (tests/migration/test_schema_truth.py compares the two)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from outreach.db import connect
from outreach.paths import sql_dir

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x6F757472  # "outr": pg_advisory_xact_lock key for migrations


@dataclass(frozen=True)
class Migration:
    """One migration file: ``version`` (int), ``name`` (str) and ``path``."""

    version: int
    name: str
    path: Path


def discover(directory: Path | None = None) -> list[Migration]:
    """List the migration files in version order.

    :raises ValueError: a file is misnamed, or two files share a version (the error names them).
    """
    directory = directory or sql_dir() / "migrations"
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        m = _FILE.match(path.name)
        if not m:
            raise ValueError(f"{path}: migration files are named NNNN_snake_case.sql")
        version = int(m.group(1))
        if version in found:
            raise ValueError(f"{path}: version {version} is also {found[version].path.name}")
        found[version] = Migration(version, m.group(2), path)
    return [found[v] for v in sorted(found)]


def upgrade(url: str, directory: Path | None = None) -> list[Migration]:
    """Apply every pending migration; return the ones applied (``[]`` when up to date).

    :raises psycopg.Error: a migration failed; it is rolled back and nothing after it runs.
    """
    applied: list[Migration] = []
    with connect(url) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute("CREATE SCHEMA IF NOT EXISTS outreach_schema")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS outreach_schema.migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())")
        for mig in discover(directory):
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                done = conn.execute("SELECT 1 FROM outreach_schema.migrations WHERE version = %s",
                                    (mig.version,)).fetchone()
                if done:
                    continue
                conn.execute(mig.path.read_text(encoding="utf-8"))
                conn.execute("INSERT INTO outreach_schema.migrations (version, name) VALUES (%s, %s)",
                             (mig.version, mig.name))
                applied.append(mig)
    return applied


def current_version(url: str) -> int | None:
    """Return the highest applied migration version, or ``None`` on an empty database."""
    with connect(url) as conn:
        exists = conn.execute("SELECT to_regclass('outreach_schema.migrations') AS t").fetchone()
        if not exists or exists["t"] is None:
            return None
        row = conn.execute("SELECT max(version) AS v FROM outreach_schema.migrations").fetchone()
        return row["v"] if row else None
