"""The ``outreach`` command line. The DAGs and the CLI call the same functions.

The database is the DAGs' (:func:`outreach.airflow.connections.database_url`; the embedded one
only with ``OUTREACH_EMBEDDED_DB=1``, or started by ``outreach demo`` / ``outreach airflow``);
SMTP connections are Airflow connections (``AIRFLOW_CONN_<ID>``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from outreach.cli import (
    audit,
    campaign,
    config,
    db,
    dev,
    dns,
    imports,
    inbox,
    lead,
    mailbox,
    postmaster,
    report,
    roles,
    send,
    serve,
    suppress,
    transactional,
    unconfirmed,
    webhooks,
)

COMMANDS = (
    db.add_db,
    config.add_config,
    imports.add_import_leads,
    imports.add_import,
    imports.add_import_suppressions,
    suppress.add_suppress,
    suppress.add_unsuppress,
    serve.add_serve_unsubscribe,
    dns.add_preflight,
    dns.add_dkim_record,
    send.add_queue_due,
    send.add_send,
    inbox.add_inbox,
    unconfirmed.add_unconfirmed,
    unconfirmed.add_resolve,
    unconfirmed.add_requeue,
    mailbox.add_mailbox,
    lead.add_lead,
    campaign.add_campaign,
    transactional.add_transactional,
    postmaster.add_postmaster,
    send.add_reap,
    report.add_report,
    webhooks.add_webhooks,
    audit.add_audit,
    roles.add_roles,
    dev.add_airflow,
    dev.add_doctor,
    dev.add_demo,
)
"""Each sub-command's parser, in the order ``outreach --help`` lists them; the command
functions live next to their parser, one module per command group."""


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every sub-command (the generated CLI reference lists them)."""
    p = argparse.ArgumentParser(prog="outreach", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return p


def _configure_logging(level: int, *, own_process: bool) -> None:
    """Log at ``level`` in the CLI's format. In a process of its own (``own_process``: the
    ``outreach`` script, ``python -m outreach.cli``) the ``outreach`` loggers write to stderr
    whichever command runs: a command that reads an Airflow connection imports Airflow, whose
    logging configuration puts a handler writing to stdout on the root logger, so their lines
    went to stdout in Airflow's format for those commands and to stderr for the others. Called
    in-process (tests), the root logger is left as it is."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    if not own_process:
        logging.basicConfig(level=level, format=fmt)
        return
    logging.basicConfig(level=level, format=fmt, force=True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    own = logging.getLogger("outreach")
    own.handlers[:] = [handler]
    own.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (``None``: ``sys.argv``, a process of its own); return the exit
    code (1 on a user-facing error, with its message on stderr)."""
    import os

    import psycopg

    from outreach.campaign import ConfigError
    from outreach.db import OutreachDBError
    from outreach.dev.embedded import StopError
    from outreach.leadfile import ImportFileError
    from outreach.paths import project_root
    from outreach.postmaster import PostmasterError
    from outreach.send import BatchAborted, MailboxUnreachable
    from outreach.settings import SettingsError, SettingValueError
    from outreach.signing import SigningError

    # The CLI reads Airflow connections; keep Airflow's files in the project, not in ~/airflow.
    os.environ.setdefault("AIRFLOW_HOME", str(project_root() / ".airflow"))
    from outreach.dev.deploy import load_dotenv_file

    load_dotenv_file(project_root() / ".env")  # like `make airflow`; the environment wins
    import signal

    def _terminate(signum, frame):
        # Turn SIGTERM into an exception so an interrupted batch records its handed-off row as
        # unconfirmed and puts the rows it never touched back in the queue (see outreach.send).
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    args = build_parser().parse_args(argv)
    _configure_logging(logging.INFO if args.verbose else logging.WARNING, own_process=argv is None)
    # The commands print their own summaries; the log repeats them only with -v.
    logging.getLogger("outreach").setLevel(logging.INFO if args.verbose else logging.WARNING)
    # The embedded server's own progress lines ("cleaning last handle …") would land on stdout
    # (Airflow's logging writes there) and break `outreach report --json`.
    logging.getLogger("pgserver").setLevel(logging.INFO if args.verbose else logging.WARNING)
    # flufl.bounce logs "Running detector …" at INFO for every bounce (issue 23: thousands of
    # lines on stdout for one read).
    logging.getLogger("flufl.bounce").setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except BrokenPipeError:
        # `outreach report --json | head`: the reader went away; that is not an error.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except psycopg.errors.UndefinedTable as exc:  # a database nobody has upgraded yet
        print(f"outreach: error: the outreach database has no schema yet "
              f"({(str(exc).strip().splitlines() or [''])[0]}): run `outreach db upgrade` first",
              file=sys.stderr)
        return 1
    except psycopg.OperationalError as exc:  # the database went away outside a send's own handling
        print(f"outreach: error: database connection lost ({type(exc).__name__}): "
              f"{(str(exc).strip().splitlines() or [''])[0]}", file=sys.stderr)
        return 1
    except SettingValueError as exc:  # a bad OUTREACH_* value: the usage is wrong, like argparse
        print(f"outreach: error: {exc}", file=sys.stderr)
        return 2
    except (ConfigError, ImportFileError, SettingsError, OutreachDBError, SigningError,
            PostmasterError, StopError, MailboxUnreachable, BatchAborted, LookupError, OSError,
            ValueError) as exc:
        print(f"outreach: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
