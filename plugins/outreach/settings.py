"""Runtime settings: every ``OUTREACH_*`` setting, parsed once, each with its range (pydantic-settings).

Each group is a frozen :class:`OutreachSettings`; a bad value raises :class:`SettingValueError` naming
the variable and what is allowed (the strict rules, issue 31: docs/reference/limits-and-config-check.md).
Every field is in the generated settings reference, and so are the variables outside the groups:

| variable                         | read by            | allowed (default)                          |
|----------------------------------|--------------------|--------------------------------------------|
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

    At most :attr:`max_attempts` attempts for mail that was not accepted, the next one
    :attr:`retry_after` later (transactional: :attr:`transactional_retry_seconds`). The reaper
    threshold must exceed one handoff (``HANDOFF_REPLIES`` × ``smtp_timeout`` + ``HANDOFF_MARGIN``);
    the batch size does not matter, each row's handoff being stamped before its MAIL FROM
    (``email_touch_claim``). ``db_recover_seconds``: how long a batch that lost its database tries to
    reconnect to record its handed-off row and release the rest. ``send_interval_minutes`` must equal
    the send DAG's schedule (``*/10 * * * *``).
    Why: pacing, the gap, parallelism and the defaults 50 and 4: docs/explanation/pacing.md; the
    ``contact_*`` caps and ``provider_hourly`` (decided in ``outreach.claim_emails_v4``):
    docs/explanation/contact-policy.md."""

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
        "planned send batches per run, one SMTP session each, 1 to 1024 (Airflow's [core] "
        "max_map_length)"))
    send_sessions_per_task: int = Field(1, ge=1, le=64, description=(
        "SMTP sessions one send task runs at once, each in its own thread and holding one slot "
        "of the outreach_smtp pool (outreach send: as many at once), 1 to 64 "
        "(docs/reference/sizing.md sets it)"))
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
    (:func:`outreach.airflow.connections.database_url`)."""

    SECRET_FIELDS: ClassVar[frozenset[str]] = frozenset({"database_url"})
    database_url: str | None = Field(None, description="a libpq URL of the outreach database")


class PreflightSettings(OutreachSettings):
    """The DNS preflight of the send DAG (see :func:`outreach.airflow.tasks_send.preflight_task`)."""

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
    or any notifier class named by ``alert_notifier`` built with ``alert_notifier_kwargs``."""

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
    """What the DAG files read at parse time (no database, no secret)."""

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

    ``queue_due_workers`` parts of the due leads, split by id, are queued at once by
    :func:`outreach.queue.queue_due`; why one by default, and the measurements:
    docs/reference/configuration.md (``OUTREACH_QUEUE_DUE_WORKERS``)."""

    queue_due_workers: int = Field(default=1, ge=1, le=16, description=(
        "connections that queue the due leads at once, each a part of them, 1 to 16"))


POSTMASTER_BASE_URL = "https://gmailpostmastertools.googleapis.com"
"""The Google Postmaster Tools API root, the default of ``OUTREACH_POSTMASTER_BASE_URL``."""


class HealthSettings(OutreachSettings):
    """Mailbox health: rate thresholds (fractions: 0.001 = 0.1 %) and the Postmaster fetch.

    ``bounce_window_days`` and ``bounce_min_sends`` serve the complaint rule too; ``postmaster_days``
    counts today. The rules:
    docs/explanation/mailbox-health.md."""

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
        """Build the settings from environment variables.

        :raises SettingsError: a value is not a number or out of range."""
        return cls()


def groups() -> Iterator[type[OutreachSettings]]:
    """Yield every settings group of the package (for documentation and tests)."""
    yield from (Settings, PreflightSettings, ScheduleSettings, QueueSettings, HealthSettings)


def import_roots(env: dict[str, str] | None = None) -> tuple[Path, ...]:
    """Return the folders that lead and do-not-contact files may be imported from, absolute, resolved.

    ``OUTREACH_IMPORT_ROOTS``: separated by ``os.pathsep`` or commas, default ``include/data``,
    relative to :func:`outreach.paths.project_root`. Why: a path typed in the Airflow UI must not
    let the worker read any other file; the check is :func:`outreach.leadfile.import_path`.

    :raises SettingsError: no folder, an empty item (``a,,b``), or a folder that does not exist."""
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
    """The thresholds of the soft-bounce and block rules (:mod:`outreach.bounces`).

    An ``authfailure`` pauses at the first one, whatever the count. The rules:
    docs/explanation/bounces-and-complaints.md#the-block-rule-sender-refused."""

    soft_bounce_days: int = Field(3, ge=1, le=30, description="days, 1 to 30")
    soft_bounce_window_days: int = Field(30, ge=1, le=365, description="days, 1 to 365")
    block_pause_count: int = Field(5, ge=1, le=10_000, description="blocks, 1 to 10000")
    block_window_hours: int = Field(24, ge=1, le=24 * 90, description="hours, 1 to 2160")


class RetentionSettings(OutreachSettings):
    """How long personal content is kept (:mod:`outreach.retention`), in whole days of 24 hours.

    Counted from ``inbound_messages.recorded_at`` and ``import_runs.created_at``; the send log is
    never purged (the promise needs it). See docs/howto/retention.md."""

    retention_inbound_days: int = Field(90, ge=1, le=3650, description="days, 1 to 3650")
    retention_import_problem_days: int = Field(30, ge=1, le=3650, description="days, 1 to 3650")


class WebhookSettings(OutreachSettings):
    """Webhooks out (:mod:`outreach.webhooks`).

    The n-th failed attempt waits base × 2^(n-1) seconds, at most the cap (``webhook_fail``); a run
    is shorter than a minute because the DAG runs every minute. See docs/howto/webhooks.md."""

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
    """The warehouse export (:mod:`outreach.export`, DAG ``outreach_export``); the DAG's params override them.

    A target's name is its cursor: a new name starts that target again from the first event.
    See docs/howto/warehouse-export.md."""

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
    """Reply notifications (:mod:`outreach.notify`, DAG ``outreach_notify_replies``).

    They go through the alert notifier (:func:`outreach.airflow.alerts.alert_notifier`).
    See docs/howto/notifications.md."""

    notify_mask: Annotated[Literal["on", "off"], _LOWER] = Field("on", description=(
        "on (the lead's address is masked in a notice) or off (shown whole)"))
    notify_lines: int = Field(5, ge=0, le=50, description=(
        "how many first lines of the reply a notice quotes, 0 to 50 (0: none)"))
    notify_chars: int = Field(500, ge=0, le=5000, description=(
        "the most characters of the reply a notice quotes, 0 to 5000"))
    notify_target: str = Field("notify-replies", pattern=_TARGET_NAME, description=(
        "the notifications' cursor name: a-z, 0-9, _ and -, at most 63"))
