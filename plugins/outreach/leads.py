"""Lead import from CRM / prospecting CSV exports.

Parsing is pure (:func:`parse_leads_csv`); applying is one transaction (:func:`import_leads`):
sync the campaign, stage the good rows, decide suppression with the one SQL function, upsert
leads, enrol them. Bad rows are reported by line number, field and reason; the good rows are
imported; importing the same file again changes nothing.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from email_validator import EmailNotValidError, validate_email

from outreach import campaign as campaign_mod
from outreach import db
from outreach.paths import resolve

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
_SPACE = re.compile(r"\s+")


class ImportFileError(ValueError):
    """The file as a whole cannot be imported (unreadable, not UTF-8, no email column)."""


@dataclass(frozen=True)
class Problem:
    """One bad row or field: ``line`` (1-based, the header is line 1), ``field``, ``reason``,
    and ``action`` (``"skipped"``: the row was not imported; ``"ignored"``: only the field was)."""

    line: int
    field: str
    reason: str
    action: str = "skipped"

    def __str__(self) -> str:
        what = "row skipped" if self.action == "skipped" else "field ignored"
        return f"line {self.line}, field {self.field}: {self.reason} ({what})"


@dataclass(frozen=True)
class LeadRow:
    """A valid lead row: ``email`` normalised (see :func:`normalise_address`)."""

    line: int
    email: str
    first_name: str
    last_name: str
    company: str
    title: str
    timezone: str | None


@dataclass
class ParsedFile:
    """The outcome of parsing: good ``rows``, ``problems``, in-file ``duplicates`` (problems too)
    and ``rows_total`` (data rows, blank lines not counted)."""

    path: str
    rows: list[LeadRow] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    duplicates: int = 0
    invalid: int = 0
    rows_total: int = 0


@dataclass
class ImportResult:
    """What an import did. ``imported`` new leads, ``updated`` known leads whose fields changed,
    ``duplicate`` rows repeating an earlier row of the file, ``unchanged`` rows whose lead was
    already known with the same fields, ``invalid`` rows skipped,
    ``suppressed`` rows whose address is suppressed (not stored), ``enrolled`` new enrolments."""

    file: str
    campaign_key: str | None
    rows_total: int = 0
    imported: int = 0
    updated: int = 0
    duplicate: int = 0
    unchanged: int = 0
    invalid: int = 0
    suppressed: int = 0
    enrolled: int = 0
    problems: list[Problem] = field(default_factory=list)
    suppressed_lines: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """Return the one-line summary for logs."""
        return (f"import {self.file}: rows={self.rows_total} imported={self.imported} "
                f"updated={self.updated} unchanged={self.unchanged} duplicate={self.duplicate} "
                f"invalid={self.invalid} "
                f"suppressed={self.suppressed} enrolled={self.enrolled}")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (for XCom and ``--json``)."""
        d = asdict(self)
        d["problems"] = [str(p) for p in self.problems]
        return d


def normalise_address(raw: str) -> str:
    """Validate an address (syntax only, no DNS) and return its normal form.

    The normal form is email-validator's normalised address, lower-cased as a whole, so that the
    same address written with different letter case is one lead.

    :raises EmailNotValidError: the address is not valid (the message says why).
    """
    result = validate_email(raw.strip(), check_deliverability=False)
    return result.normalized.lower()


def _header_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def map_headers(headers: list[str]) -> dict[str, int]:
    """Map our field names to column indexes from an export's header row.

    :returns: ``{"email": 0, "first_name": 2, …}`` for the columns found (first match wins).
    """
    lookup = {alias: f for f, aliases in HEADER_ALIASES.items() for alias in aliases}
    found: dict[str, int] = {}
    for i, name in enumerate(headers):
        f = lookup.get(_header_key(name))
        if f and f not in found:
            found[f] = i
    return found


def _clean(value: str) -> str:
    return _SPACE.sub(" ", value).strip()


def parse_leads_csv(path: str | Path) -> ParsedFile:
    """Parse a leads CSV (UTF-8, with or without BOM, header row first).

    :raises ImportFileError: the file cannot be read, is not UTF-8 (line named), is empty, or has
        no email column (the headers found are listed).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ImportFileError(f"{path}, line {line}: not UTF-8 (byte 0x{raw[exc.start]:02x}); "
                              "export the file as UTF-8 CSV") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        headers = next(reader)
    except StopIteration:
        raise ImportFileError(f"{path}: the file is empty (a header row is needed)") from None
    except csv.Error as exc:
        raise ImportFileError(f"{path}, line 1: {exc}") from None
    columns = map_headers(headers)
    if "email" not in columns:
        raise ImportFileError(f"{path}, line 1: no email column (headers: {headers}); expected one "
                              "of Email, Email Address, E-mail, Work Email…")
    out = ParsedFile(path=str(path))
    seen: dict[str, int] = {}
    start = reader.line_num + 1
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            out.rows_total += 1
            out.invalid += 1
            out.problems.append(Problem(start, "(row)", f"malformed CSV: {exc}"))
            start = reader.line_num + 1
            continue
        line, start = start, reader.line_num + 1
        if not any(cell.strip() for cell in record):
            continue
        out.rows_total += 1
        nul = next((i for i, cell in enumerate(record) if "\x00" in cell), None)
        if nul is not None:
            out.invalid += 1
            out.problems.append(Problem(line, headers[nul] if nul < len(headers) else "(row)",
                                        "contains a NUL byte (a binary or corrupted export?)"))
            continue
        if len(record) > len(headers):
            out.invalid += 1
            out.problems.append(Problem(line, "(row)", f"{len(record)} fields but the header has "
                                        f"{len(headers)} (an unquoted comma?)"))
            continue

        def cell(name: str) -> str:
            i = columns.get(name)
            return record[i] if i is not None and i < len(record) else ""

        raw_email = cell("email").strip()
        if not raw_email:
            out.invalid += 1
            out.problems.append(Problem(line, "email", "empty"))
            continue
        try:
            email = normalise_address(raw_email)
        except EmailNotValidError as exc:
            out.invalid += 1
            out.problems.append(Problem(line, "email", f"invalid address: {exc}"))
            continue
        if email in seen:
            out.duplicates += 1
            out.problems.append(Problem(line, "email", f"duplicate of line {seen[email]}"))
            continue
        values = {name: _clean(cell(name)) for name in ("first_name", "last_name", "company", "title")}
        too_long = [name for name, v in values.items() if len(v) > _MAX_FIELD]
        if too_long:
            out.invalid += 1
            out.problems.append(Problem(line, too_long[0], f"longer than {_MAX_FIELD} characters"))
            continue
        tz: str | None = _clean(cell("timezone")) or None
        if tz is not None:
            try:
                ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError):
                out.problems.append(Problem(line, "timezone", f"unknown time zone {tz!r}; the "
                                            "campaign's time zone applies", action="ignored"))
                tz = None
        seen[email] = line
        out.rows.append(LeadRow(line=line, email=email, timezone=tz, **values))
    return out


def import_leads(url: str, campaign_file: str | Path, mailbox_file: str | Path,
                 csv_file: str | Path, *, now: dt.datetime | None = None) -> ImportResult:
    """Import a leads CSV into a campaign, in one transaction.

    :param url: outreach database URL.
    :param campaign_file: the campaign YAML (synced first, so a new campaign just works).
    :param mailbox_file: the mailbox YAML.
    :param csv_file: the leads CSV.
    :param now: enrolment time (UTC); default the database clock.
    :raises ImportFileError: the CSV as a whole is unusable.
    :raises outreach.campaign.ConfigError: a configuration file is invalid.
    """
    campaign_path, csv_path = resolve(campaign_file), resolve(csv_file)
    campaign = campaign_mod.load_campaign(campaign_path)
    mailboxes = campaign_mod.load_mailboxes(mailbox_file)
    parsed = parse_leads_csv(csv_path)
    result = ImportResult(file=str(csv_file), campaign_key=campaign.key,
                          rows_total=parsed.rows_total, invalid=parsed.invalid,
                          problems=list(parsed.problems))
    with db.transaction(url) as conn:
        campaign_id = campaign_mod.sync(conn, campaign, mailboxes, str(campaign_file))
        db.run(conn, "lead_stage_create")
        with conn.cursor().copy(db.query("lead_stage_copy")) as copy:
            for r in parsed.rows:
                copy.write_row((r.line, r.email, r.first_name, r.last_name, r.company, r.title,
                                r.timezone))
        staged = db.run(conn, "lead_stage_mark_suppressed")
        result.suppressed_lines = sorted(r["line"] for r in staged if r["suppressed"])
        result.suppressed = len(result.suppressed_lines)
        upserted = db.run(conn, "lead_upsert_staged")
        result.imported = sum(1 for r in upserted if r["inserted"])
        result.updated = len(upserted) - result.imported
        result.duplicate = parsed.duplicates
        result.unchanged = len(parsed.rows) - result.suppressed - result.imported - result.updated
        result.enrolled = len(db.run(conn, "enrollment_insert_staged",
                                     {"campaign_id": campaign_id, "now": now}))
        problems = [asdict(p) for p in result.problems]
        problems += [{"line": n, "field": "email", "reason": "suppressed", "action": "skipped"}
                     for n in result.suppressed_lines]
        db.run(conn, "import_run_insert", {
            "kind": "leads", "file": str(csv_file), "campaign_key": campaign.key,
            "rows_total": result.rows_total, "imported": result.imported,
            "updated": result.updated, "duplicate": result.duplicate,
            "unchanged": result.unchanged, "invalid": result.invalid,
            "suppressed": result.suppressed, "enrolled": result.enrolled,
            "problems": json.dumps(problems)})
    return result
