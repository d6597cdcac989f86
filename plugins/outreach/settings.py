"""Runtime settings: every ``OUTREACH_*`` setting, parsed once, each with its range (pydantic-settings).

Secrets never live in the repository or the database: they come from environment variables (or
Airflow connections, see :mod:`outreach.airflow.connections`). Each group is a frozen
:class:`OutreachSettings` whose fields are the variables without their ``OUTREACH_`` prefix; a
value out of range, not a number, ``inf``/``nan`` or missing is refused with
:class:`SettingValueError` (a :class:`SettingsError`), one line naming the variable and what is allowed
(``OUTREACH_SMTP_TIMEOUT='0' is not allowed: seconds any SMTP reply may take, 1 to 600``). The CLI
prints it as ``outreach: error: …`` and exits 2; an Airflow task fails with it.

Strict values (issue 31; the rule lives in :meth:`OutreachSettings._strict`): a variable that is
set but empty is an error (unset it for the default), not the default; a number is written in
plain decimal (``10``, ``0.5``, ``1e-3``): ``1_0``, ``0x10`` or ``inf`` are errors; a list is
comma-separated without empty items (``10,,60`` and a trailing comma are errors).
``outreach config check`` (:mod:`outreach.airflow.configcheck`) builds every group below at once and
reports every problem, one line each.

| variable                         | group              | allowed (default)                          |
|----------------------------------|--------------------|--------------------------------------------|
| OUTREACH_PUBLIC_URL              | Settings           | an https:// URL (required for marketing)   |
| OUTREACH_UNSUBSCRIBE_SECRET      | Settings           | at least 16 characters (required for marketing) |
| OUTREACH_FEEDBACK_SENDER_ID      | Settings           | 5–15 characters, no ':' (outreach)         |
| OUTREACH_BATCH_SIZE              | Settings           | rows, 1 to 10000 (50)                      |
| OUTREACH_SMTP_TIMEOUT            | Settings           | seconds, 1 to 600 (30)                     |
| OUTREACH_REAPER_MINUTES          | Settings           | minutes, 1 to 1440 (30), and > one handoff |
| OUTREACH_RELEASE_SECONDS         | Settings           | seconds, 20 to 3600 (120); at most the reaper's |
| OUTREACH_SEND_INTERVAL_MINUTES   | Settings           | minutes, 0 (no pacing) to 1440 (10)        |
| OUTREACH_SEND_PARALLELISM        | Settings           | tasks, 1 to 1024 (4)                       |
| OUTREACH_TRANSACTIONAL_RETRY_SECONDS | Settings       | 1–5 comma-separated seconds, each 1 to 3600 (10,60) |
| OUTREACH_SEND_GAP_SECONDS        | Settings           | least seconds between a mailbox's handoffs, 0 to 3600 (60) |
| OUTREACH_SEND_GAP_JITTER         | Settings           | each gap up to this fraction longer, at random, 0 to 1 (0.5) |
| OUTREACH_SPAM_RATE_THRESHOLD …   | :class:`HealthSettings` | see there                     |
| OUTREACH_PREFLIGHT               | PreflightSettings  | block/warn/off (warn)                      |
| OUTREACH_SENDING_IP              | PreflightSettings  | an IP                                      |
| OUTREACH_DNS_NAMESERVER          | PreflightSettings  | IP[:PORT]                                  |
| OUTREACH_SCHEDULES               | ScheduleSettings   | on/off (on)                                |
| OUTREACH_TRANSACTIONAL_SCHEDULE  | ScheduleSettings   | a cron expression (* * * * *)              |
| OUTREACH_QUEUE_DUE_SCHEDULE      | ScheduleSettings   | a cron expression (*/15 * * * *)           |
| OUTREACH_QUEUE_DUE_WORKERS       | QueueSettings      | parts queued at once, 1 to 16 (1)          |
| OUTREACH_ALERT_TO                | AlertSettings      | comma-separated addresses (none: alerts only logged) |
| OUTREACH_ALERT_FROM              | AlertSettings      | an address                                 |
| OUTREACH_ALERT_SMTP_CONN_ID      | AlertSettings      | a connection id (outreach_alerts)          |
| OUTREACH_ALERT_NOTIFIER          | AlertSettings      | package.module:Class                       |
| OUTREACH_ALERT_NOTIFIER_KWARGS   | AlertSettings      | a JSON object                              |
| OUTREACH_DATABASE_URL            | DatabaseSettings   | a libpq URL (used when connection outreach_db is missing) |
| OUTREACH_SES_TOPIC_ARNS …        | EspSettings        | the ESP webhooks' keys (:mod:`outreach.esp`) |
| OUTREACH_WEBHOOK_TIMEOUT …       | :class:`WebhookSettings` | webhooks out (:mod:`outreach.webhooks`) |
| OUTREACH_ERASURE_KEY             | :mod:`outreach.db`  | at least 32 characters (read with ``os.environ``) |
| OUTREACH_HOME, OUTREACH_TEMPLATES | :mod:`outreach.paths` | read with ``os.environ`` (below)     |
| OUTREACH_CAMPAIGNS, OUTREACH_STATE_DIR | :mod:`outreach.paths` | read with ``os.environ`` (below) |
| OUTREACH_WORKER_HOSTNAME         | :mod:`outreach.hostname` | read with ``os.environ`` (below)      |
| OUTREACH_IMPORT_ROOTS            | :func:`import_roots` | folders imports may read (``include/data``) |
| OUTREACH_ADMIN_PASSWORD          | :mod:`outreach.airflow.roles` | user admin's first password    |

The paths and the worker hostname are read with ``os.environ`` on purpose: a settings object costs
~1.4 ms to build and these are read per rendered message.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

HANDOFF_REPLIES = 8
"""Replies one SMTP handoff may wait for: greeting, EHLO, STARTTLS, AUTH, MAIL, RCPT, DATA, end."""

HANDOFF_MARGIN = dt.timedelta(seconds=60)
"""Room for the database round trips around one handoff (the stamp, the outcome)."""


class SettingsError(ValueError):
    """A setting is missing or invalid; the message (one line) names the variable and what is
    allowed."""


class SettingValueError(SettingsError):
    """A value of a settings class (:class:`OutreachSettings`) is out of range, not a number or
    missing: the usage is wrong, so the CLI exits 2 (like argparse). ``problems``: one line per
    variable (the message joins them with ``; ``)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""Numbers as the settings take them: plain decimal, no ``_`` separators, no ``inf``/``nan``
(Python's ``int()``/``float()`` and pydantic accept ``1_0``)."""


def _variable(cls: type[BaseSettings], field: str) -> str:
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def _describe(cls: type[OutreachSettings], exc: ValidationError) -> list[str]:
    """Turn pydantic's errors into one line per variable."""
    parts = []
    for err in exc.errors(include_url=False):
        if not err["loc"]:  # a rule across fields (model validator): its own message
            parts.append(str(err.get("ctx", {}).get("error", err["msg"])))
            continue
        field = str(err["loc"][0])
        var = _variable(cls, field)
        info = cls.model_fields.get(field)
        allowed = info.description if info is not None and info.description else err["msg"]
        if err["type"] == "missing":
            parts.append(f"set {var} ({allowed}; see docs/reference/settings.md)")
        elif isinstance(err.get("input"), str) and not err["input"].strip():
            parts.append(f"{var} is set but empty: unset it for the default, or set {allowed}")
        elif field in cls.SECRET_FIELDS:
            parts.append(f"{var} is not allowed: {allowed}")  # never echo a secret
        else:
            value = err.get("input")
            shown = value if isinstance(value, str) else ",".join(map(str, value)) \
                if isinstance(value, (list, tuple)) else str(value)
            why = err["msg"].removeprefix("Value error, ") if err["type"] == "value_error" else ""
            why = f" ({why})" if why and why != allowed else ""
            parts.append(f"{var}={shown[:80]!r} is not allowed{why}: {allowed}")
    return list(dict.fromkeys(parts))


class OutreachSettings(BaseSettings):
    """Base of every settings group: fields read from ``OUTREACH_<FIELD>`` once, at construction
    (explicit keyword arguments win over the environment), frozen, unknown variables ignored,
    ``inf``/``nan`` refused, errors raised as one-line :class:`SettingValueError`."""

    model_config = SettingsConfigDict(env_prefix="OUTREACH_", extra="ignore", frozen=True,
                                      validate_default=True, allow_inf_nan=False,
                                      env_ignore_empty=False)
    SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _strict(cls, value: Any, info: ValidationInfo) -> Any:
        """The rule on every value given as text (the environment's): not empty (an empty
        variable is a mistake, not "the default"), and a number field's text is plain decimal
        (:data:`_DECIMAL`; whole fields :data:`_INT`). Lists: :data:`_COMMA_LIST`.

        :raises ValueError: empty, or not a plain number.
        """
        if not isinstance(value, str):
            return value
        if not value.strip():
            raise ValueError("empty (unset the variable to get the default)")
        kind = cls.model_fields[info.field_name].annotation if info.field_name else None
        if kind in (int, float):
            pattern = _INT if kind is int else _DECIMAL
            if not pattern.fullmatch(value.strip()):
                raise ValueError("not a plain decimal number")
        return value

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingValueError(_describe(type(self), exc)) from None

    def replace(self, **changes: Any) -> OutreachSettings:
        """Return a copy with ``changes`` applied and validated again (like
        :func:`dataclasses.replace`).

        :raises SettingsError: a changed value is out of range.
        """
        return type(self)(**{**self.model_dump(), **changes})


_LOWER = BeforeValidator(lambda v: v.strip().lower() if isinstance(v, str) else v)
"""Choices are read case-insensitively (``OUTREACH_PREFLIGHT=Block``)."""

def _comma_list(value: Any) -> Any:
    """Split a list setting's text at commas; an empty item (``10,,60``, ``a,``) is an error.

    :raises ValueError: an empty item.
    """
    if not isinstance(value, str):
        return value
    parts = [p.strip() for p in value.split(",")]
    if "" in parts:
        raise ValueError("an empty item between commas")
    return parts


def _int_items(value: Any) -> Any:
    """Each item of a list of whole numbers is plain decimal (:data:`_INT`: ``1_0`` is an error).

    :raises ValueError: an item that is not.
    """
    if isinstance(value, list) and not all(_INT.fullmatch(p) for p in value if isinstance(p, str)):
        raise ValueError("an item that is not a plain whole number")
    return value


_COMMA_LIST = BeforeValidator(_comma_list)
"""A list setting is written comma-separated (``10,60``), not as JSON, without empty items."""
_INT_ITEMS = BeforeValidator(_int_items)
"""Applied before :data:`_COMMA_LIST`'s split (Annotated runs the last first): whole items."""

PROVIDERS = ("google", "microsoft", "yahoo", "apple", "other")
"""The recipient mailbox providers (:mod:`outreach.mxproviders`, migration 0141)."""


def _provider_caps(value: Any) -> Any:
    """``microsoft=20,google=40`` → ``{"microsoft": 20, "google": 40}`` (empty: off).

    :raises ValueError: an item that is not ``provider=N`` with a known provider and a plain
        whole N from 1 to 10000, or a provider named twice.
    """
    if not isinstance(value, str):
        return value
    caps: dict[str, int] = {}
    for item in (p.strip() for p in value.split(",")) if value.strip() else ():
        name, sep, n = (x.strip() for x in item.partition("="))
        name = name.lower()
        if not sep or name not in PROVIDERS or not _INT.fullmatch(n) or not 1 <= int(n) <= 10_000:
            raise ValueError(f"items must be provider=N, provider one of {', '.join(PROVIDERS)}, "
                             f"N 1 to 10000; got {item!r}")
        if name in caps:
            raise ValueError(f"provider {name} named twice")
        caps[name] = int(n)
    return caps


class Settings(OutreachSettings):
    """Sender settings (the ``send`` path, marketing and transactional).

    Values are read by the strict rule of :meth:`OutreachSettings._strict` (empty, ``1_0`` and
    ``10,,60`` are errors); ranges are the fields' own.

    Rules: at most :attr:`max_attempts` (3) attempts in total for mail that was not accepted;
    campaign mail is retried :attr:`retry_after` (30 minutes) later, transactional mail after
    :attr:`transactional_retry_seconds` (seconds: someone is waiting for it). The reaper
    threshold must exceed the longest one SMTP handoff can take (``HANDOFF_REPLIES`` ×
    ``smtp_timeout`` + ``HANDOFF_MARGIN``), or the reaper could fail a row a live sender is
    still handing over; the batch size does not matter, because each row's handoff is stamped
    (and its claim age restarted) right before its own MAIL FROM (see ``email_touch_claim``).
    ``db_recover_seconds``: how long a batch that lost its database connection tries to
    reconnect to record the row it handed off and release the rest before it fails.

    Pacing and fan-out: ``send_interval_minutes`` is the send DAG's run interval (its schedule is
    ``*/10 * * * *``: keep the two equal); a day's sends are spread evenly over the full send
    window, no run above the steady rate ceil(daily limit / runs in the window) (``0`` turns
    pacing off: a run may use all of the day's remaining quota). ``send_parallelism`` is the number of
    mapped send tasks a run plans at most (each claims across mailboxes, at most ``batch_size``
    rows; Airflow's ``[core] max_map_length`` is 1024). The rule: ``mailbox_remaining_today`` in
    ``sql/queries/mailboxes.sql``.

    Why 50 and 4 (measured by ``make bench``, "send at 100 ms a command";
    docs/explanation/pacing.md, "Sizing the defaults"): a relay's 50–300 ms a command makes one
    message over an open session take about 3 × that latency, so a batch of 50 holds its rows
    15–45 s — enough to amortise a task's start and a session per mailbox (the reaper rule does not
    depend on the batch size). Throughput grows with the number of sessions, not our CPU, so
    parallelism is capacity: 4 × 50 = 200 emails a run, done well inside a 10-minute interval;
    raise it when the mailboxes' run shares add up to more than ``send_parallelism × batch_size``.

    Gap: two handoffs of one mailbox are at least ``send_gap_seconds`` apart, each gap longer by a
    random fraction of up to ``send_gap_jitter`` (``mailbox_reserve_handoffs``); a sender waits
    for its row's reserved moment. A claim takes only rows whose moment falls within
    :attr:`gap_horizon` (half the reaper threshold), so a row never waits long enough in
    'sending' to look stale. With the default 60–90 s a mailbox sends about 45 an hour at most;
    the 200 a run above are across mailboxes.

    Contact policy (docs/explanation/contact-policy.md): at most ``contact_per_day`` (1) campaign
    emails a person in any 24 hours and ``contact_per_week`` (3) in any 7 days, and with
    ``contact_company_per_day`` (off) at most that many people of one organisation in any 24
    hours, over all campaigns; decided inside the claim (``outreach.claim_emails_v4`` in
    ``sql/schema.sql``), a row over a cap stays queued with a later ``scheduled_for`` and its
    ``hold_reason``. ``provider_hourly`` (off): at most that many emails an hour (rolling) from
    one mailbox to recipients of each mailbox provider, the provider from the domain's cached
    MX records (:mod:`outreach.mxproviders`), decided in the same claim.
    """

    SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset({"unsubscribe_secret"})
    max_attempts: ClassVar[int] = 3
    retry_after: ClassVar[dt.timedelta] = dt.timedelta(minutes=30)
    db_recover_seconds: ClassVar[float] = 30.0

    public_url: str = Field(pattern=r"^https://\S+$", description=(
        "an https:// URL (RFC 8058 §3.1: List-Unsubscribe needs an HTTPS URI)"))
    unsubscribe_secret: str = Field(min_length=16, description="at least 16 characters")
    feedback_sender_id: str = Field("outreach", pattern=r"^[^:\s]{5,15}$", description=(
        "5 to 15 characters without ':' (Gmail Feedback-ID format a:b:c:SenderId)"))
    batch_size: int = Field(50, ge=1, le=10_000, description="rows one send task claims, 1 to 10000")
    smtp_timeout: float = Field(30.0, ge=1, le=600, description=(
        "seconds any SMTP reply may take, 1 to 600"))
    reaper_minutes: float = Field(30.0, ge=1, le=1440, description=(
        "minutes before the reaper takes a 'sending' row back, 1 to 1440"))
    release_seconds: float = Field(120.0, ge=20, le=3600, description=(
        "seconds without a heartbeat before the reaper requeues a claimed row never handed "
        "over, 20 to 3600"))
    send_interval_minutes: int = Field(10, ge=0, le=1440, description=(
        "minutes between outreach_send runs, 0 (no pacing) to 1440"))
    send_parallelism: int = Field(4, ge=1, le=1024, description=(
        "mapped send tasks per run, 1 to 1024 (Airflow's [core] max_map_length)"))
    send_gap_seconds: float = Field(60.0, ge=0, le=3600, description=(
        "least seconds between two handoffs of one mailbox, 0 (no gap) to 3600"))
    send_gap_jitter: float = Field(0.5, ge=0, le=1, description=(
        "the random lengthening of each gap, a fraction from 0 to 1"))
    contact_per_day: int = Field(1, ge=0, le=100, description=(
        "campaign emails one person (normalised address) gets in any 24 hours over all "
        "campaigns, 0 (no cap) to 100"))
    contact_per_week: int = Field(3, ge=0, le=700, description=(
        "campaign emails one person gets in any 7 days over all campaigns, 0 (no cap) to 700"))
    contact_company_per_day: int = Field(0, ge=0, le=10_000, description=(
        "different people of one organisation (Public Suffix List domain; free mail is none) "
        "contacted in any 24 hours over all campaigns, 0 (no cap) to 10000"))
    provider_hourly: Annotated[dict[str, int], NoDecode, BeforeValidator(_provider_caps)] = Field(
        default_factory=dict, description=(
            "comma-separated provider=N (google, microsoft, yahoo, apple, other; N 1 to 10000): "
            "emails an hour one mailbox sends to recipients of that provider; empty: off"))
    transactional_retry_seconds: Annotated[tuple[Annotated[int, Field(ge=1, le=3600)], ...],
                                           NoDecode, _INT_ITEMS, _COMMA_LIST] = Field(
        (10, 60), min_length=1, max_length=5, description=(
            "1 to 5 comma-separated waits in seconds, each 1 to 3600: the n-th after the n-th "
            "attempt that was not accepted (the last one repeats)"))

    @model_validator(mode="after")
    def _reaper_outlasts_one_handoff(self) -> Settings:
        longest = dt.timedelta(seconds=self.smtp_timeout * HANDOFF_REPLIES) + HANDOFF_MARGIN
        if self.reaper_threshold <= longest:
            raise ValueError(
                f"OUTREACH_REAPER_MINUTES ({self.reaper_threshold}) must exceed the longest one "
                f"SMTP handoff can take, {HANDOFF_REPLIES} × OUTREACH_SMTP_TIMEOUT + "
                f"{HANDOFF_MARGIN.seconds} s ({longest})")
        return self

    @property
    def reaper_threshold(self) -> dt.timedelta:
        """Return ``reaper_minutes`` as a duration."""
        return dt.timedelta(minutes=self.reaper_minutes)

    @property
    def release_threshold(self) -> dt.timedelta:
        """Return ``release_seconds`` as a duration: how long a claimed row never handed over may
        go without its sender's heartbeat before the reaper requeues it (``email_reap_stale``);
        never longer than :attr:`reaper_threshold`."""
        return min(dt.timedelta(seconds=self.release_seconds), self.reaper_threshold)

    @property
    def heartbeat_interval(self) -> float:
        """Return seconds between two heartbeats of a live sender's claim
        (:class:`outreach.claim.ClaimHeartbeat`): a quarter of the release threshold, so three
        heartbeats may be lost (a slow database, a busy machine) before a live claim is released."""
        return self.release_threshold.total_seconds() / 4

    @property
    def send_interval(self) -> dt.timedelta | None:
        """Return the send run interval used for pacing, or ``None`` when pacing is off."""
        return dt.timedelta(minutes=self.send_interval_minutes) if self.send_interval_minutes else None

    @property
    def gap_horizon(self) -> dt.timedelta:
        """Return how far ahead a claim reserves handoffs: half the reaper threshold."""
        return self.reaper_threshold / 2

    @property
    def unsubscribe_base(self) -> str:
        """Return the URL that unsubscribe tokens are appended to."""
        return self.public_url.rstrip("/") + "/unsubscribe/"

    def retry_delay(self, message_class: str, attempts: int) -> dt.timedelta:
        """Return how long a row waits after its ``attempts``-th attempt was not accepted:
        :attr:`retry_after` for campaign mail; for transactional mail the ``attempts``-th value
        of :attr:`transactional_retry_seconds` (the last one repeats)."""
        if message_class != "transactional":
            return self.retry_after
        waits = self.transactional_retry_seconds
        return dt.timedelta(seconds=waits[min(max(attempts, 1), len(waits)) - 1])

    @classmethod
    def from_env(cls, *, unsubscribe: bool = True, **overrides: Any) -> Settings:
        """Build the sender settings from ``OUTREACH_*`` environment variables.

        :param unsubscribe: the unsubscribe URL and secret are required (marketing mail). With
            ``False`` (transactional mail only, which carries no unsubscribe link) they may be
            unset, and placeholders that nothing uses take their place.
        :param overrides: field values that win over the environment (e.g. the secret read from
            an Airflow connection).
        :raises SettingsError: a required variable is missing or a value is invalid.
        """
        if not unsubscribe:
            if not os.environ.get("OUTREACH_PUBLIC_URL"):
                overrides.setdefault("public_url", "https://unsubscribe.invalid")
            if len(os.environ.get("OUTREACH_UNSUBSCRIBE_SECRET", "")) < 16:
                overrides.setdefault("unsubscribe_secret", "unused-by-transactional-mail")
        return cls(**overrides)


NO_DATABASE = ("no outreach database: set the Airflow connection outreach_db or "
               "OUTREACH_DATABASE_URL (OUTREACH_EMBEDDED_DB=1 allows the local embedded "
               "PostgreSQL, for development only)")
"""The one line a process without a configured database fails with
(:func:`outreach.airflow.connections.database_url`)."""


class DatabaseSettings(OutreachSettings):
    """The outreach database when the Airflow connection ``outreach_db`` does not exist
    (:func:`outreach.airflow.connections.database_url`).

    Values are read by the strict rule of :meth:`OutreachSettings._strict` (empty, ``1_0`` and
    ``10,,60`` are errors); ranges are the fields' own."""

    SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset({"database_url"})
    database_url: str | None = Field(None, description="a libpq URL of the outreach database")


class PreflightSettings(OutreachSettings):
    """The DNS preflight of the send DAG (see :func:`outreach.airflow.tasks_send.preflight_task`).

    Values are read by the strict rule of :meth:`OutreachSettings._strict` (empty, ``1_0`` and
    ``10,,60`` are errors); ranges are the fields' own."""

    preflight: Annotated[Literal["block", "warn", "off"], _LOWER] = Field("warn", description=(
        "what a failing DNS preflight does: block, warn or off"))
    sending_ip: str | None = Field(None, description="the IP address your SMTP server sends from")
    dns_nameserver: str | None = Field(None, description="a resolver as IP or IP:PORT")

    @field_validator("sending_ip")
    @classmethod
    def _ip(cls, v: str | None) -> str | None:
        if v is not None:
            ipaddress.ip_address(v.strip())
        return v.strip() if v else v

    @field_validator("dns_nameserver")
    @classmethod
    def _nameserver(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, _, port = v.strip().rpartition(":") if v.count(":") == 1 else (v.strip(), "", "")
        ipaddress.ip_address(host or v.strip())
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError("port must be 1 to 65535")
        return v.strip()


class AlertSettings(OutreachSettings):
    """Where operator alerts go (:func:`outreach.airflow.alerts.alert_notifier`): the SMTP
    provider's notifier to ``alert_to`` through the Airflow SMTP connection ``alert_smtp_conn_id``,
    or any notifier class named by ``alert_notifier`` built with ``alert_notifier_kwargs``.

    Values are read by the strict rule of :meth:`OutreachSettings._strict` (empty, ``1_0`` and
    ``10,,60`` are errors); ranges are the fields' own."""

    alert_to: Annotated[tuple[str, ...], NoDecode, _COMMA_LIST] = Field((), description=(
        "comma-separated ops addresses"))
    alert_from: str | None = Field(None, description="the alerts' From address")
    alert_smtp_conn_id: str = Field("outreach_alerts", pattern=r"^[A-Za-z0-9_\-]+$",
                                    description="an Airflow connection id")
    alert_notifier: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
                                       description="package.module:Class of an Airflow notifier")
    alert_notifier_kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "a JSON object: the notifier's keyword arguments"))


class ScheduleSettings(OutreachSettings):
    """What the DAG files read at parse time (no database, no secret).

    Values are read by the strict rule of :meth:`OutreachSettings._strict` (empty, ``1_0`` and
    ``10,,60`` are errors); ranges are the fields' own."""

    schedules: Annotated[Literal["on", "off"], _LOWER] = Field("on", description=(
        "on (DAGs keep their schedules) or off (they run only when triggered)"))
    transactional_schedule: str = Field("* * * * *", min_length=9, description=(
        "a cron expression for outreach_transactional (five fields)"))
    queue_due_schedule: str = Field("*/15 * * * *", min_length=9, description=(
        "a cron expression for outreach_queue_due (five fields), besides its leads Assets"))

    @field_validator("transactional_schedule", "queue_due_schedule")
    @classmethod
    def _five_fields(cls, v: str) -> str:
        if len(v.split()) != 5:
            raise ValueError("a cron expression has five fields")
        return v.strip()


class QueueSettings(OutreachSettings):
    """What ``outreach_queue_due`` reads (no secret): how many connections share its insert.

    ``queue_due_workers``: the due leads are split by lead id into this many parts, each queued
    by its own connection and transaction at once (:func:`outreach.queue.queue_due`). PostgreSQL
    runs one INSERT on one core and checks its foreign keys row by row, so the parts use that many
    of the database server's cores: 200,000 leads took 7.9–8.9 s in one part, 4.8–5.1 s in two and
    5.4–5.6 s in three on a 2-core server (2026-12-01); keep it at or below the server's cores.
    The default is one part because only one keeps the queue in (lead, step) order: rows due at
    the same moment are claimed by id (``outreach.claim_emails_v1``), and the ids of parts
    inserted at once interleave. Raise it for a large first run or backfill.

    Values are read by the strict rule of :meth:`OutreachSettings._strict` (empty, ``1_0`` and
    ``10,,60`` are errors); ranges are the fields' own.
    """

    queue_due_workers: int = Field(default=1, ge=1, le=16, description=(
        "connections that queue the due leads at once, each a part of them, 1 to 16"))


POSTMASTER_BASE_URL = "https://gmailpostmastertools.googleapis.com"
"""The Google Postmaster Tools API root, the default of ``OUTREACH_POSTMASTER_BASE_URL``."""


class HealthSettings(OutreachSettings):
    """Thresholds (fractions: 0.001 = 0.1 %) and the Postmaster fetch, each read once from its
    ``OUTREACH_*`` variable with its range. Values are read by the strict rule of
    :meth:`OutreachSettings._strict` (empty, ``1_0`` are errors).

    | variable                         | field                 | default |
    |----------------------------------|-----------------------|---------|
    | OUTREACH_SPAM_RATE_THRESHOLD     | spam_rate_threshold   | 0.001 (0.1 %) |
    | OUTREACH_BOUNCE_RATE_THRESHOLD   | bounce_rate_threshold | 0.03 (3 %) |
    | OUTREACH_BOUNCE_MIN_SENDS        | bounce_min_sends      | 20 |
    | OUTREACH_BOUNCE_WINDOW_DAYS      | bounce_window_days    | 28 (also the complaint rule's) |
    | OUTREACH_COMPLAINT_RATE_THRESHOLD | complaint_rate_threshold | 0.001 (0.1 %; minimum sends as the bounce rule) |
    | OUTREACH_BOUNCE_WARN_RATE        | bounce_warn_rate      | 0.02 (2 %: an alert before the pause) |
    | OUTREACH_POSTMASTER_DAYS         | postmaster_days       | 14 (days fetched, today included) |
    | OUTREACH_POSTMASTER_BASE_URL     | postmaster_base_url   | https://gmailpostmastertools.googleapis.com |
    """

    spam_rate_threshold: float = Field(0.001, gt=0, lt=0.003, description=(
        "a fraction above 0 and below 0.003 (Gmail: never reach 0.3 %)"))
    bounce_rate_threshold: float = Field(0.03, gt=0, lt=1, description=(
        "a fraction above 0 and below 1 (0.03 = 3 %)"))
    bounce_min_sends: int = Field(20, ge=1, le=1_000_000, description="sends, 1 to 1000000")
    bounce_window_days: int = Field(28, ge=1, le=365, description="days, 1 to 365")
    complaint_rate_threshold: float = Field(0.001, gt=0, lt=1, description=(
        "a fraction above 0 and below 1 (0.001 = 0.1 %)"))
    bounce_warn_rate: float = Field(0.02, gt=0, lt=1, description=(
        "a fraction above 0 and below OUTREACH_BOUNCE_RATE_THRESHOLD (0.02 = 2 %: an alert "
        "before the pause)"))
    postmaster_days: int = Field(14, ge=1, le=120, description="days, 1 to 120")
    postmaster_base_url: str = Field(POSTMASTER_BASE_URL, pattern=r"^https?://\S+$", description=(
        "an http(s):// URL (the API root)"))

    @field_validator("postmaster_base_url")
    @classmethod
    def _no_trailing_slash(cls, v: str) -> str:
        return v.rstrip("/")

    @model_validator(mode="after")
    def _warn_before_the_pause(self) -> HealthSettings:
        if not self.bounce_warn_rate < self.bounce_rate_threshold:
            raise ValueError("OUTREACH_BOUNCE_WARN_RATE must be below OUTREACH_BOUNCE_RATE_THRESHOLD "
                             "(it warns before the pause)")
        return self

    @classmethod
    def from_env(cls) -> HealthSettings:
        """Build the settings from environment variables (see the class docstring).

        :raises SettingsError: a value is not a number or out of range.
        """
        return cls()


def groups() -> Iterator[type[OutreachSettings]]:
    """Yield every settings group of the package (for documentation and tests)."""
    yield from (Settings, PreflightSettings, ScheduleSettings, QueueSettings, HealthSettings)


def import_roots(env: dict[str, str] | None = None) -> tuple[Path, ...]:
    """Return the folders that lead and do-not-contact files may be imported from:
    ``OUTREACH_IMPORT_ROOTS``, a list separated by ``os.pathsep`` (``:``) or commas, default
    ``include/data``. A relative folder is relative to the project root
    (:func:`outreach.paths.project_root`); each is returned absolute with symlinks resolved.

    Why: the ``outreach_import_leads`` form takes a path typed in the Airflow UI, and the worker
    must not read (or report lines of) any other file it can reach. The check itself is
    :func:`outreach.leadfile.import_path`.

    :raises SettingsError: the value names no folder, has an empty item (``a,,b``), or names a
        folder that does not exist.
    """
    from outreach.paths import project_root

    env = os.environ if env is None else env
    raw = env.get("OUTREACH_IMPORT_ROOTS", "include/data")
    parts = [p.strip() for p in re.split(f"[,{re.escape(os.pathsep)}]", raw)]
    if not any(parts):
        raise SettingsError("OUTREACH_IMPORT_ROOTS names no folder (default include/data)")
    if "" in parts:  # the strict list rule of every setting (OutreachSettings._strict)
        raise SettingsError(f"OUTREACH_IMPORT_ROOTS={raw[:80]!r} is not allowed: an empty item "
                            "between separators")
    roots = []
    for part in parts:
        path = Path(part).expanduser()
        root = (path if path.is_absolute() else project_root() / path).resolve()
        if not root.is_dir():
            raise SettingsError(f"OUTREACH_IMPORT_ROOTS: {part!r} is not a folder ({root})")
        roots.append(root)
    return tuple(roots)


class EspSettings(OutreachSettings):
    """The ESP webhooks' keys (:mod:`outreach.esp`, which says how each is checked); an unset
    provider's endpoint answers 404."""

    SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset({"mailgun_signing_key",
                                                         "postmark_webhook_secret"})
    ses_topic_arns: Annotated[tuple[str, ...], NoDecode, _COMMA_LIST] = Field((), description=(
        "comma-separated SNS topic ARNs whose SES notifications are ours"))
    sendgrid_webhook_public_key: str | None = Field(None, min_length=40, description=(
        "the Signed Event Webhook's public key, base64 DER (SendGrid: Mail Settings)"))
    mailgun_signing_key: str | None = Field(None, min_length=16, description=(
        "the HTTP webhook signing key (Mailgun: Sending → Webhooks)"))
    postmark_webhook_secret: str | None = Field(None, min_length=16, description=(
        "at least 16 characters: the secret in the webhook URL or its basic-auth password"))
    esp_replay_window_seconds: int = Field(300, ge=30, le=86_400, description=(
        "seconds a signed webhook's timestamp may differ from now, 30 to 86400"))

    @field_validator("ses_topic_arns")
    @classmethod
    def _arns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for arn in v:
            if not re.fullmatch(r"arn:aws(-[a-z]+)*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}", arn):
                raise ValueError(f"{arn[:80]!r} is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
        return v

    @field_validator("sendgrid_webhook_public_key")
    @classmethod
    def _ec_key(cls, v: str | None) -> str | None:
        if v is None:
            return v
        import base64
        import binascii

        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            key = serialization.load_der_public_key(base64.b64decode(v, validate=True))
        except (ValueError, binascii.Error, TypeError):
            raise ValueError("not a base64 DER public key (SendGrid: the Signed Event Webhook's "
                             "verification key)") from None
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError("not an elliptic-curve public key (SendGrid signs with ECDSA P-256)")
        return v


class BounceSettings(OutreachSettings):
    """The thresholds of the soft-bounce and block rules (:mod:`outreach.bounces`), each read once
    from its ``OUTREACH_*`` variable with its range.

    | variable                           | field                   | default |
    |------------------------------------|-------------------------|---------|
    | OUTREACH_SOFT_BOUNCE_DAYS          | soft_bounce_days        | 3 (different UTC days) |
    | OUTREACH_SOFT_BOUNCE_WINDOW_DAYS   | soft_bounce_window_days | 30 |
    | OUTREACH_BLOCK_PAUSE_COUNT         | block_pause_count       | 5 (blocks of a mailbox, or of its domain) |
    | OUTREACH_BLOCK_WINDOW_HOURS        | block_window_hours      | 24 |

    An ``authfailure`` (DMARC, SPF, DKIM) pauses at the first one, whatever the count: it is a
    property of the sending domain, and every further message fails the same way.
    """

    soft_bounce_days: int = Field(3, ge=1, le=30, description="days, 1 to 30")
    soft_bounce_window_days: int = Field(30, ge=1, le=365, description="days, 1 to 365")
    block_pause_count: int = Field(5, ge=1, le=10_000, description="blocks, 1 to 10000")
    block_window_hours: int = Field(24, ge=1, le=24 * 90, description="hours, 1 to 2160")


class RetentionSettings(OutreachSettings):
    """How long personal content is kept (:mod:`outreach.retention`), each read once from its
    ``OUTREACH_*`` variable with its range.

    | variable                               | field                         | default |
    |----------------------------------------|-------------------------------|---------|
    | OUTREACH_RETENTION_INBOUND_DAYS        | retention_inbound_days        | 90 |
    | OUTREACH_RETENTION_IMPORT_PROBLEM_DAYS | retention_import_problem_days | 30 |

    Counted from when the row was recorded (``inbound_messages.recorded_at``,
    ``import_runs.created_at``), in whole days of 24 hours. The send log is not purged: the
    promise needs its Message-IDs, statuses and times as long as the rows exist.
    """

    retention_inbound_days: int = Field(90, ge=1, le=3650, description="days, 1 to 3650")
    retention_import_problem_days: int = Field(30, ge=1, le=3650, description="days, 1 to 3650")


class WebhookSettings(OutreachSettings):
    """Webhooks out (:mod:`outreach.webhooks`), each read once from its ``OUTREACH_*`` variable
    with its range.

    | variable                            | field                      | default |
    |-------------------------------------|----------------------------|---------|
    | OUTREACH_WEBHOOK_TIMEOUT            | webhook_timeout            | 10 (seconds: connect, send, each read) |
    | OUTREACH_WEBHOOK_MAX_ATTEMPTS       | webhook_max_attempts       | 8 (then the delivery is dead) |
    | OUTREACH_WEBHOOK_RETRY_BASE_SECONDS | webhook_retry_base_seconds | 60 (the wait after the first failure) |
    | OUTREACH_WEBHOOK_RETRY_CAP_SECONDS  | webhook_retry_cap_seconds  | 3600 (the longest wait) |
    | OUTREACH_WEBHOOK_BATCH_SIZE         | webhook_batch_size         | 50 (deliveries one claim takes) |
    | OUTREACH_WEBHOOK_RUN_SECONDS        | webhook_run_seconds        | 50 (a run stops claiming after this) |
    | OUTREACH_WEBHOOK_ALLOW_PRIVATE      | webhook_allow_private      | false (non-public addresses refused) |

    The n-th failed attempt waits base × 2^(n-1) seconds, at most the cap (``webhook_fail`` in
    ``sql/queries/webhooks.sql``): with the defaults 1, 2, 4 … 64 minutes, the 8th failure about
    2 hours after the first post. Why a run is shorter than a minute: the DAG runs every minute.
    """

    webhook_timeout: float = Field(10.0, ge=1, le=120, description=(
        "seconds a webhook post may take to connect, send or answer, 1 to 120"))
    webhook_max_attempts: int = Field(8, ge=1, le=50, description=(
        "attempts before a delivery is dead, 1 to 50"))
    webhook_retry_base_seconds: float = Field(60.0, ge=1, le=86_400, description=(
        "seconds after the first failed attempt (doubled after each), 1 to 86400"))
    webhook_retry_cap_seconds: float = Field(3600.0, ge=1, le=7 * 86_400, description=(
        "the longest wait between two attempts, seconds, 1 to 604800"))
    webhook_batch_size: int = Field(50, ge=1, le=1000, description=(
        "deliveries one claim takes, 1 to 1000"))
    webhook_run_seconds: float = Field(50.0, ge=1, le=3600, description=(
        "seconds one delivery run keeps claiming, 1 to 3600"))
    webhook_allow_private: bool = Field(False, description=(
        "post to endpoints whose host is or resolves to a non-public address (loopback, private, "
        "link-local such as a cloud metadata service); off: such an endpoint is refused when added "
        "and each attempt to it fails (outreach.webhooks.destination)"))

    @property
    def lease_seconds(self) -> float:
        """Return how long a claimed delivery is kept from other runs (seconds): three times the
        timeout (connect, send, answer) plus a minute; restarted right before each post
        (``webhook_touch``)."""
        return 3 * self.webhook_timeout + 60


_TARGET_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""A cursor's name (``outreach_export_cursors_target_check``, migration 0131)."""


class ExportSettings(OutreachSettings):
    """The warehouse export (:mod:`outreach.export`, DAG ``outreach_export``), each read once from
    its ``OUTREACH_*`` variable; the DAG's params override them per run.

    | variable                        | field                   | default |
    |---------------------------------|-------------------------|---------|
    | OUTREACH_EXPORT_CONN_ID         | export_conn_id          | unset: no SQL target |
    | OUTREACH_EXPORT_SQL_TARGET      | export_sql_target       | warehouse |
    | OUTREACH_EXPORT_PATH            | export_path             | unset: no file target |
    | OUTREACH_EXPORT_PATH_CONN_ID    | export_path_conn_id     | unset (the store's default credentials) |
    | OUTREACH_EXPORT_FILES_TARGET    | export_files_target     | files |
    | OUTREACH_EXPORT_BATCH_SIZE      | export_batch_size       | 5000 events |

    A target's name is its cursor: renaming it starts that target again from the first event
    (into a new warehouse, a new folder); two names never share progress.
    """

    export_conn_id: str | None = Field(None, min_length=1, max_length=250, description=(
        "an Airflow SQL connection id (common-sql DbApiHook) for the tables"))
    export_sql_target: str = Field("warehouse", pattern=_TARGET_NAME, description=(
        "the SQL target's cursor name: a-z, 0-9, _ and -, at most 63"))
    export_path: str | None = Field(None, min_length=1, max_length=1000, description=(
        "an ObjectStoragePath URL of the folder for JSON-lines files (s3://…, file:///…)"))
    export_path_conn_id: str | None = Field(None, min_length=1, max_length=250, description=(
        "the Airflow connection id the object store is read with"))
    export_files_target: str = Field("files", pattern=_TARGET_NAME, description=(
        "the file target's cursor name: a-z, 0-9, _ and -, at most 63"))
    export_batch_size: int = Field(5000, ge=1, le=100_000, description=(
        "events per batch (one transaction, one file), 1 to 100000"))


class NotifySettings(OutreachSettings):
    """Reply notifications (:mod:`outreach.notify`, DAG ``outreach_notify_replies``), read once
    from their ``OUTREACH_*`` variables. They go through the alert notifier
    (:func:`outreach.airflow.alerts.alert_notifier`: ``OUTREACH_ALERT_TO`` or
    ``OUTREACH_ALERT_NOTIFIER``).

    | variable                  | field          | default |
    |---------------------------|----------------|---------|
    | OUTREACH_NOTIFY_MASK      | notify_mask    | on: the lead's address masked (``j***@acme.com``) |
    | OUTREACH_NOTIFY_LINES     | notify_lines   | 5 lines of the reply |
    | OUTREACH_NOTIFY_CHARS     | notify_chars   | 500 characters of the reply at most |
    | OUTREACH_NOTIFY_TARGET    | notify_target  | notify-replies (the cursor's name) |
    """

    notify_mask: Annotated[Literal["on", "off"], _LOWER] = Field("on", description=(
        "on (the lead's address is masked in a notice) or off (shown whole)"))
    notify_lines: int = Field(5, ge=0, le=50, description=(
        "how many first lines of the reply a notice quotes, 0 to 50 (0: none)"))
    notify_chars: int = Field(500, ge=0, le=5000, description=(
        "the most characters of the reply a notice quotes, 0 to 5000"))
    notify_target: str = Field("notify-replies", pattern=_TARGET_NAME, description=(
        "the notifications' cursor name: a-z, 0-9, _ and -, at most 63"))
