"""Campaign and mailbox files: reviewed YAML, validated, then synced into the database.

A campaign file (``include/campaigns/*.yaml``) names its mailboxes by address, its sequence steps
(template, subject, delay in days after the previous step), its time zone and send window. The
mailbox file (``include/mailboxes.yaml``) holds each mailbox's Airflow SMTP connection id, daily
cap and warm-up. Errors name the file, the line and the field.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from outreach import db
from outreach.content import campaign_content_version
from outreach.paths import resolve, templates_dir
from outreach.store import Conn
from outreach.store import campaigns as campaigns_store
from outreach.store import mailboxes as mailboxes_store

WEEKDAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}


class ConfigError(ValueError):
    """A campaign or mailbox file is invalid; the message names file, line and field."""


def _check_tz(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r} (use an IANA name such as Europe/Berlin)") from None
    return value


TimeZone = Annotated[str, AfterValidator(_check_tz)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


LeadField = Literal["first_name", "last_name", "company", "title"]
LEAD_FIELDS: tuple[str, ...] = get_args(LeadField)
"""The lead fields a template renders besides the address (``lead.first_name``…), read from an
import's columns and required by a step's ``requires`` (the database checks the same list:
``outreach_sequence_steps_requires_check``, migration 0080)."""


class Variant(_Model):
    """One A/B variant of a step: ``name``, its own ``subject`` and/or ``template``, and ``weight``.

    A row's share is ``weight`` / the step's weights, chosen once when queued
    (``outreach.step_variant_for``, 0126). docs/howto/campaigns.md#ab-variants."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,39}$")
    subject: str | None = Field(default=None, min_length=1, max_length=300)
    template: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-/]+$")
    weight: int = Field(default=1, gt=0, le=1_000_000)


class Step(_Model):
    """One sequence step: ``template``, ``subject`` (Jinja2), ``delay_days`` after the previous step
    was sent (step 1: after enrolment), ``requires`` and ``thread``.

    A lead blank in a ``requires`` field (:data:`LEAD_FIELDS`) is not queued for the step.
    ``thread: true`` (not on step 1) replies in step 1's thread when it really went out
    (:func:`outreach.compose.thread_of`). docs/howto/campaigns.md."""

    template: str = Field(pattern=r"^[A-Za-z0-9_\-/]+$")
    subject: str = Field(min_length=1, max_length=300)
    delay_days: int = Field(ge=0, le=365)
    requires: list[LeadField] = Field(default_factory=list)
    thread: bool = False
    variants: list[Variant] = Field(default_factory=list)
    """A/B variants (:class:`Variant`): none, or at least two with different names."""

    @field_validator("variants")
    @classmethod
    def _variants(cls, value: list[Variant]) -> list[Variant]:
        names = [v.name for v in value]
        if len(value) == 1:
            raise ValueError("a step has no variants or at least two")
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must differ, got {names}")
        return value

    def copies(self) -> list[tuple[str | None, str, str]]:
        """Return ``(variant name, template, subject)`` of every copy the step sends: the step's
        own (name ``None``) when it has no variants, else each variant's (the step's template or
        subject where the variant leaves one out)."""
        if not self.variants:
            return [(None, self.template, self.subject)]
        return [(v.name, v.template or self.template, v.subject or self.subject)
                for v in self.variants]


class SendWindow(_Model):
    """Sending days (``mon``…``sun``) and local hours ``start`` (inclusive) to ``end`` (exclusive;
    ``"24:00"`` is the end of the day)."""

    days: list[str] = Field(min_length=1)
    start: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    end: str = Field(pattern=r"^(([01]\d|2[0-3]):[0-5]\d|24:00)$")

    @field_validator("days")
    @classmethod
    def _days(cls, value: list[str]) -> list[str]:
        bad = [d for d in value if d.lower() not in WEEKDAYS]
        if bad:
            raise ValueError(f"unknown day(s) {bad}; use {list(WEEKDAYS)}")
        return [d.lower() for d in value]

    def iso_days(self) -> list[int]:
        """Return the ISO weekday numbers (1 = Monday)."""
        return sorted({WEEKDAYS[d] for d in self.days})


CustomName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
"""A custom column's name as templates see it (``lead.custom.<name>``): a header's letters and
digits lower-cased, other runs of characters one ``_`` (``Pain Point`` → ``pain_point``; see
:func:`outreach.leadcheck.custom_name`)."""
MAPPED_FIELDS: tuple[str, ...] = ("email", *LEAD_FIELDS, "timezone")
"""The lead fields a ``columns:`` mapping may name besides custom columns."""


class CsvFormat(_Model):
    """How the campaign's lead files are written; ``auto`` detects.

    The encoding from a BOM, else UTF-8 if it decodes, else Windows-1252 (Excel's "CSV"); the
    delimiter as the most frequent of ``,`` ``;`` tab in the header line."""

    encoding: Literal["auto", "utf-8", "cp1252", "utf-16"] = "auto"
    delimiter: Literal["auto", ",", ";", "\t", "tab"] = "auto"


class SqlSource(_Model):
    """Leads read by a query through an Airflow SQL connection (any conn type whose hook is a
    common-sql ``DbApiHook``: postgres, mysql, snowflake…): ``query_file`` (relative to the
    project root) holds one SELECT whose column names are the headers (mapped like a file's)."""

    conn_id: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    query_file: str = Field(min_length=1)
    fetch_size: int = Field(default=10_000, gt=0, le=1_000_000)


class FileSource(_Model):
    """Lead files in object storage, read through Airflow's ``ObjectStoragePath``: ``path`` is a
    URI with a glob in its last part (``s3://bucket/leads/*.csv``, ``file:///data/in/*.csv``),
    ``conn_id`` the Airflow connection of the store (none for ``file://``)."""

    path: str = Field(pattern=r"^[a-z][a-z0-9+.\-]*://")
    conn_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]+$")


class Source(_Model):
    """Where a campaign's leads arrive on a schedule (``outreach_import_sources``): ``sql`` or ``files``.

    ``id_column`` identifies a row across runs (default the address); ``stop_when_missing`` stops
    the enrolment of a lead a later SQL run no longer returns. A lead is never deleted."""

    sql: SqlSource | None = None
    files: FileSource | None = None
    id_column: str | None = None
    stop_when_missing: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        if (self.sql is None) == (self.files is None):
            raise ValueError("a source is either sql: {conn_id, query_file} or files: {path}")
        if self.stop_when_missing and self.files is not None:
            raise ValueError("stop_when_missing applies to a sql source (a file holds only the "
                             "rows it adds)")
        return self


class Campaign(_Model):
    """A campaign file. ``key`` is the stable identifier (a slug).

    ``custom_columns``: the extra lead columns templates may use (missing or blank: refused at
    import); ``columns`` maps a file's headers to fields; ``csv`` declares encoding and delimiter.
    docs/howto/campaigns.md."""

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]{1,62}$")
    name: str = Field(min_length=1)
    timezone: TimeZone
    send_window: SendWindow
    mailboxes: list[str] = Field(min_length=1)
    steps: list[Step] = Field(min_length=1)
    stop_on_auto_reply: bool = False
    """An automatic reply (out of office…) stops the lead's sequence too (see outreach.inbox)."""
    stop_on_domain_reply: bool = False
    """A reply stops every other lead of the same company domain in this campaign."""
    overlap: Literal["allow", "wait", "skip"] = "allow"
    """A lead already in another campaign's sequence: ``allow`` (both run; the frequency cap
    spaces the touches), ``wait`` (step 1 is queued once the other sequence is done) or ``skip``
    (enrolled stopped, the other campaign named in the reason). docs/explanation/contact-policy.md."""
    business_days: bool = False
    """Each step's ``delay_days`` counts working days: Monday to Friday, not a public holiday of
    the lead's country, in the lead's time zone (``outreach.add_working_days``, migration 0137).
    The send window's ``days`` still decide on which days mail goes out."""
    country: str | None = Field(default=None, pattern=r"^[A-Za-z]{2}$")
    """ISO 3166-1 alpha-2 code (``DE``) whose public holidays apply to a lead without its own
    ``country`` custom column. Holidays are outside every send window.
    docs/explanation/contact-policy.md "Calendars"."""
    blackout_dates: list[dt.date] = Field(default_factory=list)
    """Dates (in the lead's time zone) on which this campaign sends nothing."""
    provider_match: bool = False
    """At enrolment, a lead whose mailbox provider (its domain's MX, as cached) is a mailbox's
    own (the mailbox file's ``provider``, else its domain's MX) gets that mailbox while it is
    active, not frozen and within its share of the campaign's leads; the other leads fill the
    shares left (``enrollment_insert_staged``, migration 0145). A lead keeps its mailbox.
    docs/explanation/contact-policy.md "Provider match"."""
    custom_columns: list[CustomName] = Field(default_factory=list)
    source: Source | None = None
    schedule: str | None = None
    """When ``outreach_import_sources`` reads the source: a cron preset or expression of the
    import DAG (``@hourly``, default), or an Asset URI (``dbt://warehouse/leads_q4``) that an
    upstream DAG updates: the campaign's source is then imported by
    ``outreach_import_source_<key>``, scheduled on that Asset."""
    columns: dict[str, str] = Field(default_factory=dict)
    csv: CsvFormat = CsvFormat()
    status: Literal["draft", "active"] = "draft"
    """The status the campaign gets when it is first synced: ``draft`` (default: nothing is
    queued or sent until ``outreach campaign submit`` and ``approve``; docs/howto/
    launch-a-campaign.md) or ``active`` (sends from the next queue-due, no approval). A later sync
    never changes the status in the database."""

    @field_validator("columns")
    @classmethod
    def _columns(cls, value: dict[str, str]) -> dict[str, str]:
        import re

        for header, target in value.items():
            if target not in MAPPED_FIELDS and not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", target):
                raise ValueError(f"{header!r}: {target!r} is neither a lead field "
                                 f"({', '.join(MAPPED_FIELDS)}) nor a custom column name "
                                 "(lower-case letters, digits, _)")
        return value

    @field_validator("steps")
    @classmethod
    def _first_step_starts_the_thread(cls, steps: list[Step]) -> list[Step]:
        if steps and steps[0].thread:
            raise ValueError("step 1 cannot have 'thread: true': it starts the thread that later "
                             "steps with 'thread: true' reply in")
        return steps


class Freeze(_Model):
    """A mailbox freeze: from ``from`` to ``to`` (dates of the mailbox's time zone, both
    included) the claim takes nothing of the mailbox (``outreach.claim_emails_v4``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    from_: dt.date = Field(alias="from")
    to: dt.date

    @model_validator(mode="after")
    def _ordered(self) -> Freeze:
        if self.to < self.from_:
            raise ValueError(f"freeze: 'to' ({self.to}) is before 'from' ({self.from_})")
        return self


class Mailbox(_Model):
    """A sending mailbox. Secrets stay in the Airflow connection named by ``smtp_conn_id``.

    ``warmup_start`` turns on the warm-up ramp (docs/explanation/pacing.md). ``dkim_selector`` and
    ``dkim_key_conn_id`` (both or neither) turn on DKIM signing, ``d=`` the mailbox's domain
    (Gmail and Yahoo sender rules): docs/howto/dkim-and-dns.md."""

    address: str
    name: str = ""
    label: str = Field(default="", max_length=80, pattern=r"^[^\x00-\x1f\x7f]*$")
    """What operators call the mailbox ("anna — sales"): shown in logs, task labels and the
    campaign page instead of the address (logs never carry a full address)."""
    smtp_conn_id: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    timezone: TimeZone = "UTC"
    daily_cap: int = Field(default=50, gt=0, le=100_000)
    warmup_start: dt.date | None = None
    warmup_initial: int = Field(default=10, gt=0)
    warmup_days: int = Field(default=7, ge=0)
    warmup_increment: int = Field(default=5, ge=0)
    dkim_selector: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9\-_.]{0,62}$")
    dkim_key_conn_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]+$")
    transactional: bool = False
    """This mailbox sends transactional mail when the caller names no mailbox (at most one)."""
    imap_conn_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]+$")
    """The Airflow connection (conn type imap) of this mailbox's own inbox: the inbox reader
    (``outreach inbox``, DAG ``outreach_inbox``) reads replies, bounces and complaints there, and
    the Sent folder gives evidence for unconfirmed emails. ``None``: the inbox is not read."""
    unsubscribe_imap_conn_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_\-]+$")
    """The Airflow IMAP connection of the account that receives ``unsubscribe@<domain>`` (the
    List-Unsubscribe mailto) when that address is not delivered into this mailbox's inbox."""
    freeze: Freeze | None = None
    """``freeze: {from: 2026-12-20, to: 2027-01-03}``: the mailbox sends no campaign mail on
    those dates (its queued rows wait; transactional mail still goes)."""
    provider: Literal["google", "microsoft", "yahoo", "apple", "other"] | None = None
    """The mailbox's own mailbox provider, for a campaign's ``provider_match`` (``google`` for a
    Google Workspace mailbox). ``None``: its domain's MX provider, as cached
    (``outreach.mx_providers``, looked up by the ``mx_providers`` task of outreach_queue_due)."""
    auth: Literal["basic", "oauth2"] | None = None
    """How this mailbox's SMTP and IMAP connections log in, as reviewed in this file: ``basic``
    (password) or ``oauth2`` (XOAUTH2; docs/howto/oauth-mailboxes.md). The connections' extra
    ``auth_type`` (with the credential next to it) is what logs in; ``outreach mailbox check``
    fails a connection that disagrees with this. ``None``: not declared."""

    @model_validator(mode="after")
    def _dkim_pair(self) -> Mailbox:
        if (self.dkim_selector is None) != (self.dkim_key_conn_id is None):
            raise ValueError("dkim_selector and dkim_key_conn_id go together: set both or neither")
        return self


class MailboxFile(_Model):
    """The mailbox file: ``mailboxes: [Mailbox, …]``, at most one with ``transactional: true``."""

    mailboxes: list[Mailbox] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_transactional(self) -> MailboxFile:
        marked = [m.address for m in self.mailboxes if m.transactional]
        if len(marked) > 1:
            raise ValueError(f"at most one mailbox may be 'transactional: true', got {marked}")
        return self


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Follow a pydantic error location through the YAML node tree; return its 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if k.value == part), None)
            if nxt is None:
                break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def _load(path: Path, model: type[_Model]) -> Any:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
        tree = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML: {exc}") from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(top level)"
            line = _line_of(tree, err["loc"])
            lines.append(f"{path}, line {line}, field {field}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign file.

    :raises ConfigError: the file is missing, not YAML, or invalid (file, line, field named), or a
        step's template files are missing.
    """
    path = resolve(path)
    campaign = _load(path, Campaign)
    from outreach.render import RenderError, render

    for i, step in enumerate(campaign.steps):
        for variant, template, subject in step.copies():
            field = f"steps.{i}" + (f" variant {variant!r}" if variant else "")
            for suffix in (".txt.j2", ".html.j2"):
                if not (templates_dir() / f"{template}{suffix}").is_file():
                    raise ConfigError(f"{path}, field {field}.template: no template file "
                                      f"{templates_dir() / (template + suffix)}")
            # A typo such as {{ lead.compnay }} would fail every email of the step: refuse it now.
            try:
                render(template, subject, sample_context(campaign))
            except RenderError as exc:
                hint = (" (an extra column of the lead file, lead.custom.<name>? list it under "
                        "custom_columns)" if "has no attribute" in str(exc) else "")
                raise ConfigError(f"{path}, field {field} (template {template!r}, subject "
                                  f"{subject!r}): does not render for a sample lead: "
                                  f"{exc}{hint}") from None
    return campaign


def sample_context(campaign: Campaign) -> dict[str, Any]:
    """Return :data:`SAMPLE_CONTEXT` with the campaign's declared custom columns in
    ``lead.custom`` (``"Sample city"``…): a template using an undeclared one is refused."""
    lead = {**SAMPLE_CONTEXT["lead"],
            "custom": {name: f"Sample {name}" for name in campaign.custom_columns}}
    return {**SAMPLE_CONTEXT, "lead": lead}


SAMPLE_CONTEXT = {
    "lead": {"first_name": "Sam", "last_name": "Sample", "company": "Sample GmbH",
             "title": "Head of Operations", "email": "sam@sample.example", "custom": {}},
    "sender": {"name": "Sender Name", "address": "sender@mail.sample.example"},
    "campaign": {"key": "sample", "name": "Sample"},
    "step": 1,
    "unsubscribe_url": "https://unsubscribe.sample.example/unsubscribe/TOKEN",
}
"""The context a campaign's templates are test-rendered with when the file is loaded."""


def load_mailboxes(path: str | Path) -> list[Mailbox]:
    """Read and validate the mailbox file.

    :raises ConfigError: as for :func:`load_campaign`.
    """
    return list(_load(resolve(path), MailboxFile).mailboxes)


def upsert_mailbox(conn: Conn, m: Mailbox) -> int:
    """Create or update one mailbox from the mailbox file (never its pause status), inside the
    caller's transaction; return its id. A mailbox marked ``transactional`` takes the mark from
    any other mailbox first (at most one holds it: a unique index)."""
    if m.transactional:
        mailboxes_store.mailbox_clear_transactional(conn, address=m.address.lower())
    return mailboxes_store.mailbox_upsert(
        conn, address=m.address.lower(), display_name=m.name, label=m.label,
        smtp_conn_id=m.smtp_conn_id, timezone=m.timezone, daily_cap=m.daily_cap,
        warmup_start=m.warmup_start, warmup_initial=m.warmup_initial, warmup_days=m.warmup_days,
        warmup_increment=m.warmup_increment, dkim_selector=m.dkim_selector,
        dkim_key_conn_id=m.dkim_key_conn_id, transactional=m.transactional,
        imap_conn_id=m.imap_conn_id, unsubscribe_imap_conn_id=m.unsubscribe_imap_conn_id,
        freeze_from=m.freeze.from_ if m.freeze else None,
        freeze_to=m.freeze.to if m.freeze else None, provider=m.provider)


def sync_mailboxes(url: str, path: str | Path) -> list[int]:
    """Write every mailbox of the mailbox file into the database, in one transaction; return
    their ids. Idempotent (``outreach mailbox sync``).

    :raises ConfigError: the file is invalid (named with its line and field).
    """
    mailboxes = load_mailboxes(path)
    with db.connect(url) as conn, conn.transaction():
        return [upsert_mailbox(conn, m) for m in mailboxes]


def sync(conn: Conn, campaign: Campaign, mailboxes: list[Mailbox], source_file: str) -> int:
    """Write a campaign, its steps and its mailboxes, in the caller's transaction; return its id.

    Idempotent. Another content version of an active or paused campaign sends it back to awaiting
    approval (trigger ``outreach_campaigns_content_changed``).

    :raises ConfigError: the campaign names a mailbox that the mailbox file does not define."""
    by_address = {m.address.lower(): m for m in mailboxes}
    missing = [a for a in campaign.mailboxes if a.lower() not in by_address]
    if missing:
        raise ConfigError(f"{source_file}, field mailboxes: not in the mailbox file: {missing}")
    mailbox_ids = [upsert_mailbox(conn, by_address[address.lower()]) for address in campaign.mailboxes]
    w = campaign.send_window
    campaign_id = campaigns_store.campaign_upsert(
        conn, key=campaign.key, name=campaign.name, timezone=campaign.timezone,
        send_days=w.iso_days(), window_start=w.start,
        window_end="24:00:00" if w.end == "24:00" else w.end, source_file=source_file,
        stop_on_auto_reply=campaign.stop_on_auto_reply,
        stop_on_domain_reply=campaign.stop_on_domain_reply, status=campaign.status,
        overlap=campaign.overlap,
        content_version=campaign_content_version(campaign),
        fed_by_source=campaign.source is not None, business_days=campaign.business_days,
        country=campaign.country.upper() if campaign.country else None,
        blackout_dates=sorted(set(campaign.blackout_dates)),
        provider_match=campaign.provider_match)
    for mailbox_id in mailbox_ids:
        campaigns_store.campaign_mailbox_link(conn, campaign_id=campaign_id, mailbox_id=mailbox_id)
    campaigns_store.campaign_mailbox_unlink_others(conn, campaign_id=campaign_id,
                                                   mailbox_ids=mailbox_ids)
    for position, step in enumerate(campaign.steps, start=1):
        step_id = campaigns_store.campaign_step_upsert(
            conn, campaign_id=campaign_id, position=position, template=step.template,
            subject=step.subject, delay_days=step.delay_days,
            requires=sorted(set(step.requires)), thread=step.thread)
        for order, v in enumerate(step.variants, start=1):
            campaigns_store.campaign_variant_upsert(
                conn, step_id=step_id, name=v.name, position=order, subject=v.subject,
                template=v.template, weight=v.weight)
        campaigns_store.campaign_variant_retire_others(
            conn, step_id=step_id, names=[v.name for v in step.variants])
    return campaign_id
