"""The embedded PostgreSQL (the ``pgserver`` wheel), used when no database URL is given.

Data lives in ``.outreach/pgdata``; the server listens on a Unix socket only. It keeps running
between commands (``cleanup_mode=None``) unless started with ``stop_at_exit=True``.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

from outreach.paths import state_dir

DATABASE_NAME = "outreach"


def start(data_dir: Path | None = None, *, stop_at_exit: bool = False) -> str:
    """Start (or reuse) the embedded server and return the admin URL (database ``postgres``).

    :param data_dir: where the cluster lives (default ``.outreach/pgdata``).
    :param stop_at_exit: stop the server when this process exits, if this process started it.
    """
    import warnings

    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pgserver  # heavy; only when the embedded server is really wanted

    data_dir = data_dir or state_dir() / "pgdata"
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(str(data_dir), cleanup_mode="stop" if stop_at_exit else None)
    return server.get_uri()


def ensure_database(admin_url: str, name: str = DATABASE_NAME) -> str:
    """Create database ``name`` if missing and return its URL (same server as ``admin_url``)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(admin_url, name)


def with_database(url: str, name: str) -> str:
    """Return ``url`` pointing at database ``name`` instead."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def database_url(*, stop_at_exit: bool = False) -> str:
    """Return the outreach database URL: ``OUTREACH_DATABASE_URL``, else the embedded server's.

    :param stop_at_exit: passed to :func:`start` when the embedded server is used.
    """
    url = os.environ.get("OUTREACH_DATABASE_URL")
    if url:
        return url
    return ensure_database(start(stop_at_exit=stop_at_exit))
