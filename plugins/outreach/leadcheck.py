"""Checking lead rows: where a file's fields are (header aliases, a campaign's ``columns:``), and
the rules of one row (:func:`_check_record`), returning the stage table's row or a
:class:`Problem`; pure functions, so they run in worker processes too.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from email_validator import EmailNotValidError

from outreach import campaign as campaign_mod
from outreach.addresses import normalize_address
from outreach.leadfile import ImportFileError
from outreach.message import header_text_problem

# Header spellings of common CRM and prospecting exports (HubSpot, Salesforce, Pipedrive, Apollo,
# LinkedIn Sales Navigator, Lemlist…), compared after lower-casing and dropping non-letters.
HEADER_ALIASES: dict[str, tuple[str, ...]] = {
    "email": ("email", "emailaddress", "email1", "mail", "workemail", "businessemail",
              "primaryemail", "contactemail", "emailprimary"),
    "first_name": ("firstname", "first", "givenname", "forename", "fname"),
    "last_name": ("lastname", "last", "surname", "familyname", "lname"),
    "company": ("company", "companyname", "organization", "organisation", "account",
                "accountname", "employer", "organizationname"),
    "title": ("title", "jobtitle", "position", "role", "headline"),
    "timezone": ("timezone", "tz", "contacttimezone", "leadtimezone"),
}
_MAX_FIELD = 200
MAX_CUSTOM_FIELD = 1000
"""Characters of one extra (custom) column's value; longer is a problem naming line and field."""
MAX_CUSTOM_TOTAL = 16_384
"""Characters of a row's extra columns together (names and values); the rest of the row's
columns are not worth a lead row of unbounded size."""


@dataclass(frozen=True)
class Problem:
    """One bad row or field: ``line`` (1-based, the header is line 1), ``field``, ``reason``,
    and ``action`` (``"skipped"``: the row was not imported; ``"ignored"``: only the field was;
    ``"not enrolled"``: the lead was stored, the campaign is finished and took it not)."""

    line: int
    field: str
    reason: str
    action: str = "skipped"

    def __str__(self) -> str:
        what = {"skipped": "row skipped", "not enrolled": "lead stored, not enrolled"}.get(
            self.action, "field ignored")
        return f"line {self.line}, field {self.field}: {self.reason} ({what})"


@dataclass(frozen=True)
class LeadRow:
    """A row with a valid address: ``email`` normalised (:func:`outreach.addresses.normalize_address`).

    ``custom`` holds the extra columns; ``ignored`` the problem of a dropped field (an unknown time
    zone), or ``None``. Duplicates are decided at import, not here."""

    line: int
    email: str
    first_name: str
    last_name: str
    company: str
    title: str
    timezone: str | None
    ignored: Problem | None = None
    custom: dict[str, str] = field(default_factory=dict)


def _header_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def custom_name(header: str) -> str:
    """Return the template name of an extra column (``Pain Point`` → ``pain_point``, ``2024 Revenue``
    → ``c2024_revenue``); ``""`` without a letter or digit (the column is not kept)."""
    name = re.sub(r"[^a-z0-9]+", "_", header.lower()).strip("_")[:62]
    return f"c{name}" if name[:1].isdigit() else name


def map_headers(headers: list[str], mapping: dict[str, str] | None = None) -> dict[str, int]:
    """Map our field names to column indexes from an export's header row.

    :param mapping: a campaign's ``columns:`` (header → field), tried before the built-in
        aliases; headers are compared case-, space- and punctuation-insensitively.
    :returns: ``{"email": 0, "first_name": 2, …}`` for the known fields found (first match
        wins); the other columns: :func:`_map_all`.
    """
    return _map_all(headers, mapping)[0]


def _map_all(headers: list[str], mapping: dict[str, str] | None,
             ) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """``(known fields → index, [(custom name, index), …])`` of a header row."""
    known = {"email", "first_name", "last_name", "company", "title", "timezone"}
    declared = {_header_key(h): target for h, target in (mapping or {}).items()}
    lookup = {alias: f for f, aliases in HEADER_ALIASES.items() for alias in aliases}
    found: dict[str, int] = {}
    custom: dict[str, int] = {}
    for i, name in enumerate(headers):
        key = _header_key(name)
        target = declared.get(key) or lookup.get(key)
        if target in known:
            found.setdefault(target, i)
        elif target:  # mapped to a custom name
            custom.setdefault(target, i)
        elif (c := custom_name(name)):
            custom.setdefault(c, i)
    return found, list(custom.items())


def _clean(value: str) -> str:
    # Runs of whitespace (CR/LF included) become one space; the same as re.sub(r"\s+", " ")
    # followed by strip(): str.split() and re's \s use the same Unicode whitespace test.
    return " ".join(value.split())


@functools.lru_cache(maxsize=1024)
def _known_zone(name: str) -> bool:
    """Whether ``name`` is an IANA time zone (cached: a file has few distinct zones). A folder of
    the zone database (``America``) or an over-long name is not one."""
    if len(name) > 64:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters (a header name in a problem report)."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def subject_custom_columns(campaign: campaign_mod.Campaign | None) -> set[str] | None:
    """Return the custom columns the campaign's subjects render (held to the header rule at import);
    ``None`` when a subject uses ``lead.custom`` in a way not read here (then all are held to it)."""
    names: set[str] = set()
    for step in campaign.steps if campaign else ():
        plain = re.findall(r"lead\.custom\.([a-z][a-z0-9_]*)", step.subject)
        keyed = re.findall(r"lead\.custom\[\s*['\"]([a-z][a-z0-9_]*)['\"]\s*\]", step.subject)
        if step.subject.count("lead.custom") > len(plain) + len(keyed):
            return None
        names.update(plain, keyed)
    return names


StagedRow = tuple
"""One row of the stage table as COPY writes it: ``(line, email, first_name, last_name, company,
title, timezone, custom (a JSON object as text), problem_field, problem_reason,
problem_action)``; ``email`` is ``None`` for a
skipped row (the problem says why), the problem fields are ``None`` for a clean good row."""


@dataclass(frozen=True)
class _Layout:
    """Where a file's fields are: header names (cut for reports), column indexes; the extra
    columns ``custom`` (name, index), the ``required`` ones (a blank value is a problem) and
    those held to the header rule (``header_safe``: a subject renders them)."""

    headers: tuple[str, ...]
    i_email: int
    i_tz: int | None
    named: tuple[tuple[str, int | None], ...]
    columns: dict[str, int]
    custom: tuple[tuple[str, int], ...] = ()
    required: tuple[str, ...] = ()
    header_safe: frozenset[str] = frozenset()
    subjects: tuple[str, ...] = ()
    subject_has_encoded_word: bool = False


def layout_for(source: str, headers: list[str], campaign: campaign_mod.Campaign | None = None,
               *, hint: str = "") -> _Layout:
    """Return where the fields of rows under ``headers`` (a CSV header row or SQL column names) are.

    :param source: the file (or source) named in errors.
    :param campaign: its ``columns:``, ``custom_columns`` and subjects; ``None``: built-in aliases.
    :param hint: appended to the no-email-column error (how the file was read).
    :raises ImportFileError: no email column (headers listed), or a declared custom column missing."""
    columns, custom = _map_all(headers, campaign.columns if campaign else None)
    if "email" not in columns:
        # Only header names, cut and at most ten: not the file's first line as such.
        shown = [_short(h, 40) for h in headers[:10]]
        more = f" and {len(headers) - 10} more" if len(headers) > 10 else ""
        raise ImportFileError(f"{source}, line 1: no email column (headers: {shown}{more}); "
                              "expected one of Email, Email Address, E-mail, Work Email… or a "
                              f"columns: mapping in the campaign file{hint}")
    have = {name for name, _ in custom}
    required = tuple(campaign.custom_columns) if campaign else ()
    missing = [c for c in required if c not in have]
    if missing:
        raise ImportFileError(f"{source}, line 1, field {missing[0]}: a column the campaign "
                              f"needs (custom_columns) is not in the header (custom columns "
                              f"found: {sorted(have)[:20]}); add it or map a header to it under "
                              "columns:")
    in_subject = subject_custom_columns(campaign)
    subjects = tuple(step.subject for step in campaign.steps) if campaign else ()
    return _Layout(tuple(_short(h) for h in headers), columns["email"], columns.get("timezone"),
                   tuple((name, columns.get(name)) for name in campaign_mod.LEAD_FIELDS),
                   columns, tuple(custom), required,
                   frozenset(have if in_subject is None else in_subject & have), subjects,
                   any("=?" in subject for subject in subjects))


def _combined_header_problem(layout: _Layout, email: str, values: list[str],
                             custom: dict[str, str]) -> tuple[str, str] | None:
    """``(field, reason)`` when this row's To and Subjects together break
    :func:`outreach.message.lead_header_problem`, though each value alone passed.

    Only rows with ``=`` or ``?`` (or subjects holding ``=?``) can form an encoded word, so only
    they are rendered and checked."""
    named = dict(zip((name for name, _ in layout.named), values, strict=True))
    in_header = [*named.items(), *((n, custom.get(n, "")) for n in sorted(layout.header_safe)),
                 ("email", email)]
    suspect = [name for name, v in in_header if "=" in v or "?" in v]
    if not suspect and not layout.subject_has_encoded_word:
        return None
    from outreach.message import lead_header_problem, recipient_name
    from outreach.render import RenderError, render_subject

    lead = {**named, "email": email, "custom": custom}
    subjects = []
    for position, subject in enumerate(layout.subjects, start=1):
        try:
            subjects.append(render_subject(subject, {**campaign_mod.SAMPLE_CONTEXT, "lead": lead,
                                                     "step": position}))
        except RenderError:
            continue  # not a header question: the send fails this row at stage RENDER
    why = lead_header_problem(email, recipient_name(named.get("first_name", ""),
                                                    named.get("last_name", "")), subjects or [""])
    if why is None:
        return None
    return (suspect[0] if suspect else "subject",
            f"{why}: the values together would break a header (the message builder refuses it)")


def _problem_row(p: Problem) -> StagedRow:
    return (p.line, None, None, None, None, None, None, None, p.field, p.reason, p.action)


def _check_chunk(layout: _Layout, records: list[tuple[int, list[str]]]) -> list[StagedRow | None]:
    """:func:`_check_record` for each ``(line, cells)`` (run in a worker process)."""
    return [_check_record(layout, line, record) for line, record in records]


def _check_record(layout: _Layout, line: int, record: list[str]) -> StagedRow | None:
    """Check and clean one CSV record; the first problem found makes the row a problem. Pure.

    Blank cells: no row (``None``). Skipped: a NUL, too many cells, a bad address, a value unsafe in
    a header, a field over :data:`_MAX_FIELD` (custom: :data:`MAX_CUSTOM_FIELD`,
    :data:`MAX_CUSTOM_TOTAL`), a required custom column blank, unsafe combined headers. An unknown
    time zone only drops that field. The limits: docs/reference/limits-and-config-check.md."""
    joined = "".join(record)  # one test per row instead of one per cell
    if not joined or joined.isspace():  # every cell blank
        return None
    headers = layout.headers
    n_headers, n = len(headers), len(record)

    def problem(field: str, reason: str) -> StagedRow:
        return (line, None, None, None, None, None, None, None, field, reason, "skipped")

    if "\x00" in joined:
        nul = next(i for i, cell in enumerate(record) if "\x00" in cell)
        return problem(headers[nul] if nul < n_headers else "(row)",
                       "contains a NUL byte (a binary or corrupted export?)")
    if n > n_headers:
        return problem("(row)", f"{n} fields but the header has {n_headers} "
                       "(an unquoted delimiter?)")
    i_email = layout.i_email
    raw_email = record[i_email].strip() if i_email < n else ""
    if not raw_email:
        return problem("email", "empty")
    try:
        email = normalize_address(raw_email)
    except EmailNotValidError as exc:
        return problem("email", f"invalid address: {exc}")
    if "=?" in email and (why := header_text_problem(email)):  # it is written in To:
        return problem("email", f"{why}: not allowed in a header")
    named = layout.named
    values = [_clean(record[i]) if i is not None and i < n else "" for _, i in named]
    too_long = next((name for (name, _), v in zip(named, values, strict=True) if len(v) > _MAX_FIELD), None)
    if too_long:
        return problem(too_long, f"longer than {_MAX_FIELD} characters")
    # These fields are rendered into the Subject and the To display name: the one rule on header
    # text decides (outreach.message.header_text_problem); the message builder checks it again
    # for rows that reached the table another way.
    unsafe = next(((name, why) for (name, _), v in zip(named, values, strict=True)
                   if (why := header_text_problem(v))), None)
    if unsafe:
        return problem(unsafe[0], f"{unsafe[1]}: not allowed in a header")
    custom: dict[str, str] = {}
    size = 0
    for name, i in layout.custom:
        v = _clean(record[i]) if i < n else ""
        if len(v) > MAX_CUSTOM_FIELD:
            return problem(name, f"longer than {MAX_CUSTOM_FIELD} characters")
        size += len(name) + len(v)
        if size > MAX_CUSTOM_TOTAL:
            return problem(name, f"the extra columns together are longer than {MAX_CUSTOM_TOTAL} "
                           "characters (drop the columns the templates do not use)")
        if name in layout.header_safe and (why := header_text_problem(v)):
            return problem(name, f"{why}: not allowed in a header (a subject uses it)")
        custom[name] = v
    blank = next((c for c in layout.required if not custom.get(c)), None)
    if blank:
        return problem(blank, "empty (the campaign needs it: custom_columns)")
    # The whole record without "=" or "?" cannot form an encoded word: one scan for most rows.
    if layout.subject_has_encoded_word or "=" in joined or "?" in joined:
        combined = _combined_header_problem(layout, email, values, custom)
        if combined:
            return problem(*combined)
    extra = json.dumps(custom, ensure_ascii=False)
    i_tz = layout.i_tz
    tz: str | None = _clean(record[i_tz]) if i_tz is not None and i_tz < n else ""
    if not tz:
        return (line, email, *values, None, extra, None, None, None)
    if not _known_zone(tz):
        return (line, email, *values, None, extra, "timezone",
                f"unknown time zone {tz!r}; the campaign's time zone applies", "ignored")
    return (line, email, *values, tz, extra, None, None, None)
