r"""sql/schema.sql is the database the migrations build (real PostgreSQL, real pg_dump).

One database is built by ``outreach.migrate.upgrade`` from every file of sql/migrations, one by
running sql/schema.sql; ``pg_dump --schema-only`` of both must be identical, so a reader of
schema.sql reads what production runs. Normalised, and why:

* the schema ``outreach_schema`` (the migrations bookkeeping table) is left out of both dumps: it
  belongs to the migration runner (migrate.py creates it, not a migration), and schema.sql is never
  used to build a database that migrate.py would then upgrade;
* pg_dump's ``\restrict``/``\unrestrict`` lines (PostgreSQL 13.22+/…/17.6+) carry a random key
  per run, so they are dropped.
Nothing else is normalised: names, column order, constraint text, defaults, comments, function
bodies and owners must match exactly.
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest

from outreach.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
while not (ROOT / "sql").is_dir():  # the test may sit in a subfolder of tests/
    ROOT = ROOT.parent
SCHEMA = ROOT / "sql" / "schema.sql"


def _url(admin_url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(admin_url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def _major(pg_dump: str) -> int | None:
    out = subprocess.run([pg_dump, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"\(PostgreSQL\) (\d+)", out)
    return int(m.group(1)) if m else None


def _pg_dump_for(server_major: int) -> str:
    """The pg_dump of the server's major version: the pgserver wheel's, the Debian/Ubuntu
    /usr/lib/postgresql/<major>/bin one, or the one on PATH (a newer pg_dump would dump the same
    schema with other syntax in places; an older one refuses the server)."""
    candidates = []
    try:
        from pgserver._commands import POSTGRES_BIN_PATH

        candidates.append(str(Path(POSTGRES_BIN_PATH) / "pg_dump"))
    except ImportError:
        pass
    candidates.append(f"/usr/lib/postgresql/{server_major}/bin/pg_dump")
    if shutil.which("pg_dump"):
        candidates.append(shutil.which("pg_dump"))
    for path in candidates:
        if Path(path).is_file() and _major(path) == server_major:
            return path
    pytest.fail(f"no pg_dump of PostgreSQL {server_major} found (looked at {candidates})")


def _dump(pg_dump: str, url: str) -> list[str]:
    out = subprocess.run([pg_dump, "--schema-only", "--exclude-schema=outreach_schema",
                          "--dbname", url], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines()
            if not re.match(r"\\(un)?restrict ", line)]


@pytest.fixture
def two_databases(pg_admin_url: str):
    """Two empty databases on the test server: (migrated URL, schema.sql URL)."""
    names = [f"outreach_truth_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("mig", "file")]
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    yield tuple(_url(pg_admin_url, name) for name in names)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_schema_sql_is_what_the_migrations_build(two_databases):
    migrated, from_file = two_databases
    upgrade(migrated)
    with psycopg.connect(from_file, autocommit=True) as conn:
        conn.execute(SCHEMA.read_text(encoding="utf-8"))
        server_major = conn.info.server_version // 10000
    pg_dump = _pg_dump_for(server_major)
    want, got = _dump(pg_dump, migrated), _dump(pg_dump, from_file)
    diff = "\n".join(difflib.unified_diff(want, got, "migrations", "sql/schema.sql", lineterm=""))
    assert not diff, ("sql/schema.sql differs from what sql/migrations builds; change schema.sql "
                      "in the same commit as the migration:\n" + diff[:6000])
    assert any("CREATE FUNCTION outreach.claim_emails_v1" in line for line in want)
