"""What the command groups share: the database URL (the DAGs', or the embedded server on the
developer's opt-in), paths the user typed, the operator's name and positive integers."""

from __future__ import annotations

import argparse
from typing import Any

from outreach.dev import embedded


def database_url() -> str:
    """The outreach database: the DAGs' (:func:`outreach.airflow.connections.database_url`), else, only
    with ``OUTREACH_EMBEDDED_DB=1``, the embedded server's.

    :raises outreach.settings.SettingsError: none (:data:`outreach.settings.NO_DATABASE`), or
        ``OUTREACH_EMBEDDED_DB`` is neither 1 nor 0."""
    from outreach.airflow.connections import database_url as airflow_database_url
    from outreach.settings import SettingsError

    try:
        return airflow_database_url()
    except SettingsError:
        if not embedded.opted_in():
            raise
        return embedded.database_url()


def user_path(path: str | None, default: str | None = None) -> str | None:
    """A path the user typed, made absolute against the current directory (where the user is);
    ``default`` (a project file, relative to the project root) when none was given."""
    import os

    from outreach.paths import project_root

    if path is None:
        return None if default is None else str(project_root() / default)
    return os.path.abspath(os.path.expanduser(path))


def operator_name() -> str:
    """The name of the user running the command (``--by`` when not given), else ``unknown``."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def cli_who() -> Any:
    """Who makes a decision from the command line (:class:`outreach.audit.Who`): the OS user,
    ``os:<login>``, through ``cli`` — recorded in the audit trail whatever ``--by`` says."""
    from outreach.audit import cli_who as make

    return make(operator_name())


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1.

    :raises argparse.ArgumentTypeError: not a number, or below 1.
    """
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
