"""An embedded PostgreSQL (pgserver) of a test's own: each pytest worker's test server
(``tests/conftest.py``: ``pg_admin_url``) and the servers of the tests that restart theirs (the
chaos test's, the Celery module's), started the same way."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg


@contextlib.contextmanager
def embedded_server(prefix: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """Start a fresh embedded PostgreSQL; yield ``(admin_url, restart)``, ``restart()`` being
    ``pg_ctl restart -m fast`` (every session cut, every committed row kept); stop it and remove
    its folder after.

    Its data folder is a new temporary folder named ``prefix…``, not under pytest's basetemp: the
    server runs as pgserver's own user, and every pytest session that starts takes group/other
    access away from /tmp/pytest-of-<user>, which made the server of a concurrent session PANIC
    ("pg_control: Permission denied"). A throw-away server: nothing it holds must outlive an
    operating-system crash, so it skips the flushes that make data survive one (``fsync``,
    ``full_page_writes``; a killed or restarted PostgreSQL still keeps every committed row, and
    ``synchronous_commit`` stays on: tests/integration/test_ledger_commit.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver._commands import pg_ctl

        pgdata = Path(tempfile.mkdtemp(prefix=prefix))
        if os.geteuid() == 0:
            # As root pgserver runs the server as a `pgserver` user it creates when missing; on a
            # new machine every xdist worker's useradd raced, and one worker's server got a uid
            # that no longer existed ("initdb: could not look up effective user ID 1001").
            from filelock import FileLock
            from pgserver.utils import ensure_user_exists

            with FileLock(str(Path(tempfile.gettempdir()) / "outreach-pgserver-user.lock")):
                ensure_user_exists("pgserver")
        server = pgserver.get_server(str(pgdata), cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name in ("fsync", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {name} = off")
        conn.execute("SELECT pg_reload_conf()")

    def restart() -> None:
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)

    try:
        yield server.get_uri(), restart
    finally:
        # Stopped now, while pytest's output streams are still open, not at interpreter exit.
        server.cleanup()
        atexit.unregister(server._cleanup)
        shutil.rmtree(pgdata, ignore_errors=True)


def clone_database(admin_url: str, name: str, template: str) -> None:
    """``CREATE DATABASE name TEMPLATE template`` on the server of ``admin_url``; by copying the
    template's files (``STRATEGY FILE_COPY``) where the server skips ``fsync``, as the embedded
    test servers do (:func:`embedded_server`). PostgreSQL 15's default writes the whole copy to
    the WAL: 0.07 CPU-seconds a clone of the outreach template against 0.03, ~50 CPU-seconds over
    the suite's ~950 clones. A file copy forces a checkpoint, cheap without ``fsync`` but not on a
    server that flushes (OUTREACH_TEST_ADMIN_URL's, under load: 5.9 s a clone and drop against
    2.5), which keeps its default; PostgreSQL 14 has no STRATEGY (it always copies files)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        copy = (conn.info.server_version >= 150000
                and conn.execute("SELECT current_setting('fsync')").fetchone()[0] == "off")
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'
                     + (" STRATEGY FILE_COPY" if copy else ""))
