"""The embedded PostgreSQL (the ``pgserver`` wheel): a development database, never a default.

Started by ``make demo`` and the LocalExecutor ``make airflow`` when no database is configured,
used elsewhere only with ``OUTREACH_EMBEDDED_DB=1``; everywhere else a missing database is an
error (:data:`NO_DATABASE`). Data in ``.outreach/pgdata``, a Unix socket only; it keeps running
between commands until :func:`stop`. Run as root, pgserver runs the server as its own user."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

from outreach import settings
from outreach.paths import state_dir

DATABASE_NAME = "outreach"
OPT_IN = "OUTREACH_EMBEDDED_DB"
"""``1``: a process may fall back to the embedded server when no database is configured."""
NO_DATABASE = settings.NO_DATABASE
"""The one line a process without a configured database fails with (defined in
:mod:`outreach.settings`, where the Airflow wing reads it too)."""


def start(data_dir: Path | None = None, *, stop_at_exit: bool = False) -> str:
    """Start (or reuse) the embedded server and return the admin URL (database ``postgres``).

    Who stops it: pgserver stops a server when the last process using it exits, if that process
    asked for the stop. The ask belongs to the server, not to the process: a process that starts
    it with ``stop_at_exit`` writes the server's start time to :data:`STOP_WHEN_IDLE`, and every
    process that then uses that same server asks too, so it stops when its last user is gone
    (two launchers, whichever exits last). One started without it (``outreach report``) is left
    running for the next command, whoever uses it after.

    :param data_dir: where the cluster lives (default ``.outreach/pgdata``).
    :param stop_at_exit: stop the server when its users are gone, if this process starts it.
    """
    import warnings

    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pgserver  # heavy; only when the embedded server is really wanted

    data_dir = data_dir or state_dir() / "pgdata"
    data_dir.mkdir(parents=True, exist_ok=True)
    marker = data_dir / STOP_WHEN_IDLE
    before = _running_since(data_dir)
    if before is None:
        stop = stop_at_exit
    else:
        stop = before != "?" and marker.is_file() and marker.read_text().strip() == before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(str(data_dir), cleanup_mode="stop" if stop else None)
    if before is None and stop_at_exit:
        since = _running_since(data_dir)
        if since is not None and since != "?":  # "?" would match any other unreadable start
            marker.write_text(since + "\n")
    _STOPS_AT_EXIT[data_dir.resolve()] = stop or _STOPS_AT_EXIT.get(data_dir.resolve(), False)
    return server.get_uri()


STOP_WHEN_IDLE = ".outreach-stop-when-idle"
"""In the data directory: the start time of the server a ``stop_at_exit`` process started
(:func:`start`); a file naming another start time is stale and ignored."""


_STOPS_AT_EXIT: dict[Path, bool] = {}


def _running_since(data_dir: Path) -> str | None:
    """The start time (Unix seconds, as text) of the server running in ``data_dir``, else
    ``None``; ``"?"`` for one whose ``postmaster.pid`` cannot be read (started outside pgserver).
    Read under pgserver's own lock, which it holds while it starts a server: the file is
    written line by line as the server starts."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import PostgresServer
        from pgserver.utils import PostmasterInfo

    with PostgresServer._lock:
        try:
            info = PostmasterInfo.read_from_pgdata(data_dir)
        except (AssertionError, ValueError, KeyError, IndexError):
            return "?"
        if info is None or not info.is_running():
            return None
        return str(int(info.start_time.timestamp()))


def stops_at_exit(data_dir: Path | None = None) -> bool | None:
    """Whether the embedded server of ``data_dir`` (default ``.outreach/pgdata``) stops when its
    users are gone and this process is the last (:func:`start`); ``None``: this process did
    not use it."""
    return _STOPS_AT_EXIT.get((data_dir or state_dir() / "pgdata").resolve())


class StopError(RuntimeError):
    """The embedded server runs but could not be stopped (the message says why and what to do)."""


def stop(data_dir: Path | None = None, *, timeout: int = 60) -> str:
    """Stop the embedded server of ``data_dir`` if one is running, whoever started it; return one line.

    ``pg_ctl stop -m fast`` as the data directory's owner (the server's own user when root runs this).

    :param data_dir: the cluster (default ``.outreach/pgdata``).
    :param timeout: seconds to wait for the server to exit.
    :raises StopError: the server did not stop (its message is included)."""
    import logging
    import pwd
    import subprocess
    import warnings

    data_dir = (data_dir or state_dir() / "pgdata").resolve()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir) if data_dir.is_dir() else None
    if info is None or not info.is_running():
        return f"nothing was running: no embedded PostgreSQL server in {data_dir}"
    owner = data_dir.stat().st_uid
    user = None
    if os.geteuid() == 0 and owner != 0:
        user = pwd.getpwuid(owner).pw_name
    elif owner != os.geteuid():
        raise StopError(f"the embedded PostgreSQL server in {data_dir} (pid {info.pid}) runs as "
                        f"user {pwd.getpwuid(owner).pw_name}: run `outreach db stop` as that "
                        "user or as root")
    quiet = logging.getLogger("pgserver")
    level, quiet.level = quiet.level, logging.CRITICAL  # its multi-line dump; we say it in one
    try:
        pgserver.pg_ctl(["-w", "-t", str(timeout), "-m", "fast", "stop"], pgdata=data_dir,
                        user=user)
    except subprocess.CalledProcessError as exc:
        raise StopError(f"pg_ctl stop failed for {data_dir} (pid {info.pid}): exit status "
                        f"{exc.returncode}; see {data_dir / 'log'}") from None
    finally:
        quiet.setLevel(level)
    return f"stopped the embedded PostgreSQL server in {data_dir} (pid {info.pid})"


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


def opted_in() -> bool:
    """Whether ``OUTREACH_EMBEDDED_DB`` allows the embedded fallback (``1``/``on``/``true``).

    :raises outreach.settings.SettingsError: another value than those or ``0``/``off``/``false``.
    """
    from outreach.settings import SettingsError

    value = os.environ.get(OPT_IN, "").strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return False
    if value in ("1", "on", "true", "yes"):
        return True
    raise SettingsError(f"{OPT_IN} must be 1 or 0, got {value!r}")


def database_url(*, stop_at_exit: bool = False) -> str:
    """Return ``OUTREACH_DATABASE_URL``, else, only with ``OUTREACH_EMBEDDED_DB=1``, the embedded server's.

    :param stop_at_exit: passed to :func:`start` when the embedded server is used.
    :raises outreach.settings.SettingsError: neither is configured (:data:`NO_DATABASE`)."""
    from outreach.settings import SettingsError

    url = settings.DatabaseSettings().database_url
    if url:
        return url
    if not opted_in():
        raise SettingsError(NO_DATABASE)
    return ensure_database(start(stop_at_exit=stop_at_exit))


def local_database_url() -> str:
    """For the local launchers only: ``OUTREACH_DATABASE_URL``, else the embedded server, stopped when
    this process exits (sets ``OUTREACH_EMBEDDED_DB=1`` here: the developer's opt-in)."""
    os.environ.setdefault(OPT_IN, "1")
    return database_url(stop_at_exit=True)
