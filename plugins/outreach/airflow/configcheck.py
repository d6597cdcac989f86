"""``outreach config check``: every setting and connection a deployment uses, checked at once.

:func:`check` builds every settings group (and ``OUTREACH_IMPORT_ROOTS``), loads the mailbox and
campaign files, connects to the database and looks up every connection the mailbox file names,
collecting every problem, one line each (issue 31: a bad value used to fail some task later).
Who runs it, the checks and the limits: docs/reference/limits-and-config-check.md."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCOPES = ("settings", "files", "database", "connections")
"""What :func:`check` can check: settings (every ``OUTREACH_*`` value), files (the mailbox and
campaign files), database (connect, schema current), connections (the Airflow connections the
mailbox file and the alert settings name)."""


@dataclass
class ConfigReport:
    """What :func:`check` found: ``problems`` (one line each, naming the variable, file or
    connection and what to fix) and ``checked`` (what passed, for the summary line)."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing is wrong."""
        return not self.problems

    def summary(self) -> str:
        """Return the one-line result: ``config check: OK (…)`` or ``config check: N problem(s)``."""
        if self.ok:
            return f"config check: OK ({', '.join(self.checked)})"
        return f"config check: {len(self.problems)} problem(s)"

    def one_line(self) -> str:
        """Return every problem in one line (an Airflow task's failure message)."""
        return f"{self.summary()}: " + "; ".join(self.problems)


def _settings_problems(build: Callable[[], Any]) -> list[str]:
    """Build one settings group; return its problems (one per variable)."""
    from outreach.settings import SettingsError, SettingValueError

    try:
        build()
    except SettingValueError as exc:
        return list(exc.problems)
    except SettingsError as exc:
        return [str(exc)]
    return []


def check_settings(report: ConfigReport, *, marketing: bool = True,
                   extra: Iterable[Callable[[], Any]] = ()) -> None:
    """Add the problems of every settings group and of the variables read elsewhere.

    :param marketing: the unsubscribe URL and secret are required (campaign files exist).
    :param extra: more readers raising :class:`outreach.settings.SettingsError` (the CLI's)."""
    from outreach import settings as settings_module
    from outreach.airflow.alerts import alert_notifier
    from outreach.settings import OutreachSettings, Settings, import_roots

    def secret() -> Any:
        if marketing:
            from outreach.airflow.connections import unsubscribe_secret

            unsubscribe_secret()

    def sender() -> Any:
        if not marketing:
            return Settings.from_env(unsubscribe=False)
        # The secret's own problem is secret()'s; the other sender values are checked anyway.
        return Settings.from_env(unsubscribe_secret=os.environ.get(
            "OUTREACH_UNSUBSCRIBE_SECRET") or "checked-by-secret-above")

    before = len(report.problems)
    # Every settings group, found rather than listed (a group added later is checked too);
    # Settings itself is built by sender() above, with the secret checked on its own.
    groups = [cls for cls in vars(settings_module).values()
              if isinstance(cls, type) and issubclass(cls, OutreachSettings)
              and cls not in (OutreachSettings, Settings) and cls.__module__ == settings_module.__name__]
    builds: Iterable[Callable[[], Any]] = (secret, sender, *groups, alert_notifier, import_roots,
                                           *extra)
    for build in builds:
        report.problems.extend(_settings_problems(build))
    if len(report.problems) == before:
        report.checked.append("settings")
    report.problems[before:] = list(dict.fromkeys(report.problems[before:]))


def check_files(report: ConfigReport, mailbox_file: Path) -> list[Any]:
    """Add the problems of the mailbox file and of every campaign file; return the mailboxes
    (none when the file is invalid)."""
    from outreach.campaign import ConfigError, load_campaign, load_mailboxes
    from outreach.paths import campaigns_dir

    before = len(report.problems)
    mailboxes: list[Any] = []
    try:
        mailboxes = list(load_mailboxes(mailbox_file))
    except (ConfigError, OSError) as exc:
        report.problems.append(str(exc))
    campaigns = sorted(campaigns_dir().glob("*.yaml"))
    for path in campaigns:
        try:
            load_campaign(path)
        except (ConfigError, OSError) as exc:
            report.problems.append(str(exc))
    if len(report.problems) == before:
        report.checked.append(f"{len(mailboxes)} mailbox(es), {len(campaigns)} campaign file(s)")
    return mailboxes


def check_database(report: ConfigReport, url_of: Callable[[], str]) -> None:
    """Connect to the outreach database (5 s at most) and check that every migration ran.

    :param url_of: returns the database URL (the tasks': :func:`outreach.airflow.connections.database_url`),
        or raises :class:`outreach.settings.SettingsError` when none is configured.
    """
    import psycopg

    from outreach.migrate import current_version, discover
    from outreach.settings import SettingsError

    try:
        url = url_of()
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        version, latest = current_version(url), max(m.version for m in discover())
    except SettingsError as exc:
        report.problems.append(str(exc))
        return
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        report.problems.append(f"outreach database: cannot connect ({first}): check the Airflow "
                               "connection outreach_db or OUTREACH_DATABASE_URL")
        return
    if version != latest:
        report.problems.append(f"outreach database: schema at migration "
                               f"{f'{version:04d}' if version else 'none'}, "
                               f"this code needs {latest:04d}: run `outreach db upgrade`")
        return
    report.checked.append(f"database (migration {latest:04d})")


def check_connections(report: ConfigReport, mailboxes: list[Any]) -> None:
    """Look up every Airflow connection the mailboxes and the alerts name: an SMTP connection
    needs a host, a DKIM key connection a PEM private key, an IMAP one a host and a login.
    Nothing is dialled: the send DAG's preflight and the inbox reader do that."""
    from outreach.airflow.connections import _connection, dkim_private_key, imap_account
    from outreach.settings import AlertSettings, SettingsError
    from outreach.signing import SigningError, public_key_b64

    before, seen = len(report.problems), 0
    wanted: dict[str, str] = {}
    for mb in mailboxes:
        wanted.setdefault(mb.smtp_conn_id, "smtp")
        for conn_id, kind in ((mb.dkim_key_conn_id, "dkim"), (mb.imap_conn_id, "imap"),
                              (getattr(mb, "unsubscribe_imap_conn_id", None), "imap")):
            if conn_id:
                wanted.setdefault(conn_id, kind)
    try:
        alerts = AlertSettings()
        if alerts.alert_to and not alerts.alert_notifier:
            wanted.setdefault(alerts.alert_smtp_conn_id, "alerts")
    except SettingsError:
        pass  # reported by check_settings
    for conn_id, kind in wanted.items():
        seen += 1
        try:
            if kind == "dkim":
                public_key_b64(dkim_private_key(conn_id))
            elif kind == "imap":
                imap_account(conn_id)
            else:
                conn = _connection(conn_id)
                if conn is None:
                    raise LookupError(f"no Airflow connection {conn_id!r} ({kind}; set "
                                      f"AIRFLOW_CONN_{conn_id.upper()} or add it in the Airflow UI)")
                if not conn.host:
                    raise LookupError(f"Airflow connection {conn_id!r} ({kind}) has no host")
        except (LookupError, SigningError, ValueError) as exc:
            report.problems.append(str(exc))
    if len(report.problems) == before:
        report.checked.append(f"{seen} connection(s)")


def check(scopes: Iterable[str] = SCOPES, *, mailbox_file: Path | None = None,
          database_url: Callable[[], str] | None = None,
          extra: Iterable[Callable[[], Any]] = ()) -> ConfigReport:
    """Check the deployment's configuration; return every problem found.

    :param scopes: which of :data:`SCOPES` to check (default all).
    :param mailbox_file: the mailbox file (default ``include/mailboxes.yaml`` of the project).
    :param database_url: returns the database URL (default the tasks' ``database_url``).
    :param extra: more settings readers (see :func:`check_settings`).
    :raises ValueError: an unknown scope."""
    from outreach.airflow.connections import database_url as tasks_database_url
    from outreach.paths import campaigns_dir, project_root

    scopes = set(scopes)
    if unknown := scopes - set(SCOPES):
        raise ValueError(f"unknown config check scope(s) {sorted(unknown)}; known: {SCOPES}")
    report = ConfigReport()
    if "settings" in scopes:
        check_settings(report, marketing=any(campaigns_dir().glob("*.yaml")), extra=extra)
    mailboxes: list[Any] = []
    if scopes & {"files", "connections"}:
        mailboxes = check_files(report, mailbox_file or project_root() / "include" / "mailboxes.yaml")
    if "database" in scopes:
        check_database(report, database_url or tasks_database_url)
    if "connections" in scopes:
        check_connections(report, mailboxes)
    return report
