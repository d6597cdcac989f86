"""Lead import from CRM / prospecting CSV exports.

Reading is pure and streamed (:func:`open_leads_csv` yields one row at a time); applying is one
transaction (:func:`import_leads`): sync the campaign, COPY the rows into a temporary stage
table as they are read, a batch at a time, each batch's suppression decided by the one SQL
function while the next is read; then find in-file duplicates, upsert leads and enrol them with
set-based statements that return counts, not rows. Memory does not grow with the file. Bad
rows are reported by line number, field and reason; the good rows are imported; importing the
same file again changes nothing. Text that would be unsafe in a
header (see :func:`outreach.message.header_text_problem`) makes its row a problem.
"""

from __future__ import annotations

import codecs
import csv
import datetime as dt
import functools
import itertools
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from email_validator import EmailNotValidError

from outreach import campaign as campaign_mod
from outreach import db
from outreach.addresses import normalize_address
from outreach.logutil import log
from outreach.message import header_text_problem
from outreach.paths import resolve
from outreach.store import enrollments as enrollments_store
from outreach.store import import_runs
from outreach.store import leads as leads_store

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
# Problems returned to the caller in ImportResult.problems (all of them are stored in the
# import_runs row): a file of a million bad rows must not become a million objects in memory.
PROBLEMS_SHOWN = 1000
PROBLEMS_STORED = 100_000  # in outreach.import_runs.problems; the rest are counted (migration 0007)
PROGRESS_ROWS = 50_000  # a progress line every this many rows read (about every 5 s at 10k rows/s)
# Address validation (email-validator, about 12 µs an address once its domain was seen) is the
# largest part of an import's Python time: files from this size on are checked in parallel
# processes when there are enough cores (import_workers).
PARALLEL_FROM_BYTES = 4 << 20  # about 40,000 rows of a typical CRM export
MAX_WORKERS = 8
MAX_ROW_CHARS = 1 << 20
"""Characters of one CSV row as read, line breaks included (1,048,576): a physical line, or the
lines of one record joined by a quoted field. The reader (:class:`BoundedLines`) reads a line at
most this long plus one, so a file without line breaks (or ``/dev/zero`` behind a name) costs this
much memory and is refused at once, naming its line; a CRM export's row is a few hundred."""
MAX_FIELD_CHARS = 131_072
"""Characters of one CSV field (Python's ``csv.field_size_limit``, set to this when this module
is imported): longer, even within one row's limit, is a malformed-CSV problem of that row."""
csv.field_size_limit(MAX_FIELD_CHARS)


class ImportFileError(ValueError):
    """The file as a whole cannot be imported (outside the import roots, not a regular file,
    unreadable, not UTF-8, a row over :data:`MAX_ROW_CHARS`, no email column)."""


def regular_file(path: Path, shown: str | Path | None = None) -> Path:
    """Return ``path`` if it is a regular file (or does not exist: opening it then says so).

    Checked with ``stat``, which opens nothing: opening a FIFO blocks until a writer comes, and a
    device (``/dev/zero``) or socket has no end. Symlinks are followed (:func:`import_path`
    resolved them already).

    :param shown: the path as the user gave it, named in the error (default ``path``).
    :raises ImportFileError: it is a FIFO, a device, a socket or a folder.
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return path
    if stat.S_ISREG(mode):
        return path
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a folder" if stat.S_ISDIR(mode) else "not a regular file")
    raise ImportFileError(f"{shown or path}: {kind}, not a regular file; only regular files are "
                          "imported (nothing was read from it)")


def open_regular(path: Path, mode: str = "r", **kwargs: Any) -> IO[Any]:
    """Open ``path`` for reading like :meth:`Path.open`, refusing anything but a regular file.

    :func:`regular_file` checks the path before any work; this checks the descriptor actually
    opened, so a FIFO swapped in between that check and the open cannot block the run: the open
    itself is non-blocking (``O_NONBLOCK`` returns at once on a FIFO with no writer) and
    ``fstat`` of the descriptor decides.

    :param mode: ``"r"`` or ``"rb"``; ``kwargs`` as for :func:`open` (encoding, newline, errors).
    :raises ImportFileError: the opened file is not a regular file (nothing read from it).
    :raises ValueError: ``mode`` is not a reading mode.
    :raises OSError: it cannot be opened.
    """
    if mode not in ("r", "rb"):
        raise ValueError(f"open_regular reads only (mode 'r' or 'rb'), not {mode!r}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            raise ImportFileError(f"{path}: not a regular file (it changed after it was checked); "
                                  "only regular files are imported (nothing was read from it)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, mode, **kwargs)  # closes fd itself if it fails (closefd=True)


class BoundedLines:
    """Iterate the lines of a text file opened with ``newline=""``, none longer than ``limit``
    characters, for :func:`csv.reader`: each line is read with ``readline(limit + 1)``, so memory
    is bounded by ``limit`` whatever the file holds.

    ``line`` is the number of the last line returned (``first_line`` - 1 before any);
    :meth:`new_row` starts a row: the lines returned until the next call count together against
    ``limit`` too (a quoted field may join lines into one record).

    :raises ImportFileError: (while iterating) a line, or a row's lines together, are longer
        than ``limit`` (the file and line are named; nothing was imported).
    """

    def __init__(self, file: Any, path: str | Path, *, limit: int = MAX_ROW_CHARS,
                 first_line: int = 1) -> None:
        self._file, self._path, self._limit = file, path, limit
        self.line = first_line - 1
        self._row_start, self._row_chars = first_line, 0

    def new_row(self) -> None:
        """Start counting a new row at the next line."""
        self._row_start, self._row_chars = self.line + 1, 0

    def __iter__(self) -> BoundedLines:
        return self

    def __next__(self) -> str:
        text = self._file.readline(self._limit + 1)
        if not text:
            raise StopIteration
        self.line += 1
        self._row_chars += len(text)
        if self._row_chars > self._limit:
            where = (f"line {self.line}" if self._row_start >= self.line
                     else f"lines {self._row_start}–{self.line} (one quoted row)")
            raise ImportFileError(
                f"{self._path}, {where}: a row longer than {self._limit:,} characters "
                "(outreach.leads.MAX_ROW_CHARS): no line breaks, or not a CSV export?; "
                "nothing was imported")
        return str(text)


def import_path(path: str | Path, *, base: Path | None = None,
                roots: tuple[Path, ...] | None = None,
                hint: str = "move the file there or add its folder to OUTREACH_IMPORT_ROOTS") -> Path:
    """Return the file to import for ``path``, checked against the import roots.

    The path is made absolute (a relative one against ``base``, default the project root: the
    Airflow form's paths; the CLI passes the user's current directory), then symlinks and
    ``..`` are resolved, and the result must lie inside one of ``roots`` (default
    :func:`outreach.settings.import_roots`, ``OUTREACH_IMPORT_ROOTS``). Nothing of a file
    outside them is opened, so no error can show its content; the message does not say whether
    such a file exists. ``hint`` ends the message (what to do instead).

    :raises ImportFileError: the resolved path is outside every root, or it is not a regular
        file (a FIFO, device or socket: :func:`regular_file`, nothing opened).
    :raises outreach.settings.SettingsError: ``OUTREACH_IMPORT_ROOTS`` is invalid.
    """
    from outreach.paths import project_root
    from outreach.settings import import_roots

    roots = import_roots() if roots is None else roots
    given = Path(path).expanduser()
    real = (given if given.is_absolute() else (base or project_root()) / given).resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise ImportFileError(f"{path}: not inside an import folder ({', '.join(map(str, roots))}); "
                              f"{hint}")
    return regular_file(real, path)


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

    ``custom`` holds the extra columns (:func:`custom_name` → cleaned text). ``ignored`` is the
    problem of a field that was dropped from an otherwise good row (an unknown time zone), or
    ``None``. Whether the row repeats an earlier row of the file is
    decided when it is imported (:func:`import_leads`), not here.
    """

    line: int
    email: str
    first_name: str
    last_name: str
    company: str
    title: str
    timezone: str | None
    ignored: Problem | None = None
    custom: dict[str, str] = field(default_factory=dict)


@dataclass
class ImportResult:
    """What an import did. ``imported`` new leads, ``updated`` known leads whose fields changed,
    ``duplicate`` rows repeating an earlier row of the file, ``unchanged`` rows whose lead was
    already known with the same fields, ``invalid`` rows skipped,
    ``suppressed`` rows whose address is suppressed (not stored), ``enrolled`` new enrolments.

    ``problems`` holds the first :data:`PROBLEMS_SHOWN` problems by line (duplicates included,
    suppressed lines not: the first :data:`PROBLEMS_SHOWN` of them are in ``suppressed_lines``,
    all are counted in ``suppressed``); ``problems_omitted`` counts the rest. The first
    :data:`PROBLEMS_STORED` problems are stored in the ``outreach.import_runs`` row, the rest
    counted there.
    """

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
    problems_omitted: int = 0
    suppressed_lines: list[int] = field(default_factory=list)
    run_id: int | None = None
    campaign_id: int | None = None
    stopped: int = 0
    """Enrolments stopped because their row left a source (``stop_when_missing``)."""
    overlap_skipped: int = 0
    """Leads enrolled stopped because they are in another campaign's sequence (the campaign's
    ``overlap: skip``; docs/explanation/contact-policy.md)."""
    not_enrolled: int = 0
    """Lines whose lead was stored but not enrolled because the campaign is finished (each is
    a problem with action ``not enrolled``): a finished campaign takes no new leads."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each stage, in order: ``read`` (reading and checking the rows, in this
    process), ``copy`` (writing them to the stage table), ``suppression`` (waiting for it: a
    CSV file's is asked batch by batch while the next batch is read, a source's after all rows),
    ``duplicates``, ``upsert``, ``enrol``, ``record`` (the problems and the run row): where a
    slow import spends its time."""

    def nothing_imported(self) -> str | None:
        """Return why the import did nothing useful — the file had no data rows, or every row
        was invalid — or ``None``. The CLI exits non-zero and the Airflow task fails on it (the
        run and its problems are stored all the same)."""
        if self.rows_total == 0:
            return f"nothing imported: {self.file} has no data rows"
        if self.invalid == self.rows_total:
            return (f"nothing imported: all {self.rows_total} rows of {self.file} are invalid "
                    f"(see the problems; outreach import show {self.run_id} --problems)")
        return None

    def summary(self) -> str:
        """Return the one-line summary for logs."""
        run = f" (run {self.run_id})" if self.run_id is not None else ""
        return (f"import {self.file}{run}: rows={self.rows_total} imported={self.imported} "
                f"updated={self.updated} unchanged={self.unchanged} duplicate={self.duplicate} "
                f"invalid={self.invalid} "
                f"suppressed={self.suppressed} enrolled={self.enrolled}"
                + (f" stopped={self.stopped}" if self.stopped else "")
                + (f" skipped_in_other_campaign={self.overlap_skipped}"
                   if self.overlap_skipped else "")
                + (f" not_enrolled={self.not_enrolled} (campaign {self.campaign_key} is "
                   "finished: it takes no new leads)" if self.not_enrolled else ""))

    def timings(self) -> str:
        """Return :attr:`seconds` for a log line: ``read 34.1 s, suppression 0.0 s, …``."""
        return ", ".join(f"{stage} {s:.1f} s" for stage, s in self.seconds.items())

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (for XCom and ``--json``)."""
        d = asdict(self)
        d["problems"] = [str(p) for p in self.problems]
        return d


# The one address normaliser lives in outreach.addresses; the old name stays for callers.
normalise_address = normalize_address


def _header_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def custom_name(header: str) -> str:
    """Return the template name of an extra column (``lead.custom.<name>``): letters and digits
    lower-cased, every other run of characters one ``_``, a leading digit prefixed with ``c``
    (``Pain Point`` → ``pain_point``, ``2024 Revenue`` → ``c2024_revenue``); ``""`` for a
    header with no letter or digit (such a column is not kept)."""
    name = re.sub(r"[^a-z0-9]+", "_", header.lower()).strip("_")[:62]
    return f"c{name}" if name[:1].isdigit() else name


def map_headers(headers: list[str], mapping: dict[str, str] | None = None) -> dict[str, int]:
    """Map our field names to column indexes from an export's header row.

    :param mapping: a campaign's ``columns:`` (header → field), tried before the built-in
        aliases; headers are compared case-, space- and punctuation-insensitively.
    :returns: ``{"email": 0, "first_name": 2, …}`` for the known fields found (first match
        wins); see :func:`map_custom` for the other columns.
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


_ENCODING_NAMES = {"utf-8-sig": "UTF-8", "utf-8": "UTF-8", "cp1252": "Windows-1252",
                   "utf-16": "UTF-16"}


def _first_bad_byte(path: Path, encoding: str) -> tuple[int, int]:
    """Return ``(line, byte)`` of the first byte of ``path`` that ``encoding`` cannot decode
    (read in blocks). Lines end as the CSV reader ends them: CRLF, LF or a lone CR. For UTF-16
    the line is found in the text decoded with replacement characters and the byte is 0."""

    def breaks(data: bytes | str) -> int:
        nl, cr, crlf = (("\n", "\r", "\r\n") if isinstance(data, str) else (b"\n", b"\r", b"\r\n"))
        return data.count(nl) + data.count(cr) - data.count(crlf)

    line, pending = 1, b""
    if encoding == "utf-16":
        with open_regular(path, "r", encoding="utf-16", errors="replace", newline="") as t:
            tail = ""  # a CR at the end of a block may be the first half of a CRLF
            while text := t.read(1 << 20):
                data, tail = (tail + text)[:-1], (tail + text)[-1:]
                if (bad := data.find("\ufffd")) >= 0:
                    return line + breaks(data[:bad]), 0
                line += breaks(data)
        return line, 0  # a last character that did not decode is on the last line anyway
    with open_regular(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            data = pending + block
            try:
                data.decode(encoding)
                line += breaks(data)
                pending = b""
            except UnicodeDecodeError as exc:
                if block and exc.reason == "unexpected end of data":  # split across two blocks
                    line += breaks(data[:exc.start])
                    pending = data[exc.start:]
                    continue
                return line + breaks(data[:exc.start]), data[exc.start]
            if not block:
                return line, 0


def detect_encoding(path: Path, declared: str = "auto") -> str:
    """Return the Python codec to read ``path`` with: ``declared`` (``utf-8``, ``cp1252``,
    ``utf-16``) if not ``auto``; else UTF-16 or UTF-8 by a byte order mark, else UTF-8 if the
    first 64 KiB decode as UTF-8, else Windows-1252 (what Excel writes for "CSV" on Western
    Windows). A later byte that does not decode is an error naming its line (nothing imported).

    :raises OSError: the file cannot be read.
    """
    if declared != "auto":
        return {"utf-8": "utf-8-sig"}.get(declared, declared)
    with open_regular(path, "rb") as f:
        head = f.read(1 << 16)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8-sig"


def detect_delimiter(header_line: str, declared: str = "auto") -> str:
    """Return the delimiter: ``declared`` (``tab`` is a tab), else the one of ``,`` ``;`` tab
    occurring most often outside quotes in the header line (``,`` when none does: a file of one
    column)."""
    if declared != "auto":
        return "\t" if declared == "tab" else declared
    unquoted = re.sub(r'"[^"]*"', "", header_line)
    counts = {d: unquoted.count(d) for d in (",", ";", "\t")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def subject_custom_columns(campaign: campaign_mod.Campaign | None) -> set[str] | None:
    """Return the custom columns the campaign's subjects render (those values reach a header
    and are held to :func:`outreach.message.header_text_problem` at import); ``None`` when a
    subject uses ``lead.custom`` in a way not read here (then every custom value is held to
    it). Bodies are not headers: the HTML part autoescapes (outreach.render)."""
    names: set[str] = set()
    for step in campaign.steps if campaign else ():
        plain = re.findall(r"lead\.custom\.([a-z][a-z0-9_]*)", step.subject)
        keyed = re.findall(r"lead\.custom\[\s*['\"]([a-z][a-z0-9_]*)['\"]\s*\]", step.subject)
        if step.subject.count("lead.custom") > len(plain) + len(keyed):
            return None
        names.update(plain, keyed)
    return names


class LeadsCsv:
    """A leads CSV (header row first) opened for reading row by row.

    Encoding and delimiter are the campaign's ``csv:`` or detected (:func:`detect_encoding`,
    :func:`detect_delimiter`). Use as a context manager and iterate: each data row yields
    either a :class:`LeadRow` (a valid address; other fields cleaned) or a :class:`Problem`
    (the row is skipped), in file order (see :func:`_check_record`). Blank lines yield nothing.
    Only the current row is held in memory.

    Attributes: ``path``; ``encoding``, ``delimiter``; ``headers`` (the header row);
    ``columns`` (see :func:`map_headers`); ``custom`` (``[(name, index)]``); ``rows_total``
    (data rows read so far, blank lines not counted); ``invalid`` (rows skipped so far).

    :raises ImportFileError: (on opening) the file cannot be read, is empty, its header does not
        decode or is not CSV, it has no email column (the headers found are listed) or lacks a
        declared custom column; (while iterating) a line does not decode (the line is named).
    """

    def __init__(self, path: str | Path, campaign: campaign_mod.Campaign | None = None, *,
                 encoding: str | None = None, delimiter: str | None = None) -> None:
        self.path = Path(path)
        fmt = campaign.csv if campaign else campaign_mod.CsvFormat()
        regular_file(self.path)
        try:
            self.encoding = detect_encoding(self.path, encoding or fmt.encoding)
            self._file = open_regular(self.path, "r", encoding=self.encoding, newline="")
        except OSError as exc:
            raise ImportFileError(f"{self.path}: cannot read: {exc.strerror}") from exc
        try:
            self._lines = BoundedLines(self._file, self.path)
            try:
                first = next(self._lines, "")
            except UnicodeDecodeError:
                raise self._undecodable() from None
            if not first.strip("\r\n\ufeff"):
                raise ImportFileError(f"{self.path}: the file is empty (a header row is needed)")
            self.delimiter = detect_delimiter(first.lstrip("\ufeff"), delimiter or fmt.delimiter)
            # strict: a quote never closed is an error at the end of the file, not a last field
            # that silently swallowed every row after it.
            self._reader = csv.reader(itertools.chain([first.lstrip("\ufeff")], self._lines),
                                      strict=True, delimiter=self.delimiter)
            try:
                self.headers: list[str] = next(self._reader)
            except StopIteration:
                raise ImportFileError(f"{self.path}: the file is empty (a header row is needed)") from None
            except csv.Error as exc:
                raise ImportFileError(f"{self.path}, line 1: {exc}") from None
            except UnicodeDecodeError:
                raise self._undecodable() from None
            if any("\x00" in h for h in self.headers):
                raise ImportFileError(f"{self.path}, line 1: the header row contains a NUL byte "
                                      "(a binary or corrupted export?)")
            shown = {"\t": "tab"}.get(self.delimiter, self.delimiter)
            self.layout = layout_for(str(self.path), self.headers, campaign, hint=(
                f" (read as {_ENCODING_NAMES[self.encoding]} with delimiter {shown!r}; "
                "declare csv: {encoding, delimiter} if that is wrong)"))
            self.columns = self.layout.columns
            self.custom = list(self.layout.custom)
        except BaseException:
            self._file.close()
            raise
        self.rows_total = 0
        self.invalid = 0

    def __enter__(self) -> LeadsCsv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def _undecodable(self) -> ImportFileError:
        name = _ENCODING_NAMES[self.encoding]
        line, byte = _first_bad_byte(self.path, self.encoding)
        what = f" (byte 0x{byte:02x})" if byte else ""
        return ImportFileError(f"{self.path}, line {line}: not {name}{what}; export the file as "
                               "UTF-8 CSV, or declare its encoding in the campaign file "
                               "(csv: {encoding: utf-8 | cp1252 | utf-16}); nothing was imported")

    def _layout(self) -> _Layout:
        return self.layout

    def _records(self) -> Iterator[tuple[int, list[str]] | Problem]:
        """Yield ``(line, cells)`` per record, or a :class:`Problem` for malformed CSV (which
        counts as a row read and skipped)."""
        reader = self._reader
        start = reader.line_num + 1
        while True:
            self._lines.new_row()
            try:
                record = next(reader)
            except StopIteration:
                return
            except UnicodeDecodeError:
                raise self._undecodable() from None
            except csv.Error as exc:
                self.rows_total += 1
                self.invalid += 1
                end = reader.line_num
                where = "" if end <= start else (
                    f" (lines {start}–{end} were read as one row: a quote never closed? "
                    "those lines were not imported)")
                yield Problem(start, "(row)", f"malformed CSV: {exc}{where}")
                start = end + 1
                continue
            line, start = start, reader.line_num + 1
            yield line, record

    def _count(self, staged: StagedRow | None) -> StagedRow | None:
        if staged is not None:
            self.rows_total += 1
            if staged[1] is None:
                self.invalid += 1
        return staged

    def staged(self, workers: int = 0, chunk: int = 2000) -> Iterator[StagedRow]:
        """Yield every data row as the stage table's COPY row (:data:`StagedRow`), in file order.

        With ``workers`` ≥ 2 the rows are checked (:func:`_check_record`: address validation is
        most of an import's Python time) in that many processes, ``chunk`` records at a time,
        while this process reads on; at most ``2 × workers`` chunks are in flight, so memory
        stays flat. The result is the same as with ``workers`` 0 (checked here).

        :raises ImportFileError: a line is not UTF-8 (the line is named).
        """
        layout = self._layout()
        if workers < 2:
            for item in self._records():
                if isinstance(item, Problem):
                    yield _problem_row(item)
                elif (staged := self._count(_check_record(layout, *item))) is not None:
                    yield staged
            return
        import multiprocessing
        from collections import deque
        from concurrent.futures import ProcessPoolExecutor

        pending: deque = deque()
        batch: list[tuple[int, list[str]]] = []
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            try:
                def drain(limit: int) -> Iterator[StagedRow]:
                    while len(pending) > limit:
                        done = pending.popleft()
                        if isinstance(done, Problem):
                            yield _problem_row(done)
                            continue
                        for staged in done.result():
                            if self._count(staged) is not None:
                                yield staged

                for item in self._records():
                    if isinstance(item, Problem):
                        if batch:
                            pending.append(pool.submit(_check_chunk, layout, batch))
                            batch = []
                        pending.append(item)
                    else:
                        batch.append(item)
                        if len(batch) >= chunk:
                            pending.append(pool.submit(_check_chunk, layout, batch))
                            batch = []
                    yield from drain(2 * workers)
                if batch:
                    pending.append(pool.submit(_check_chunk, layout, batch))
                yield from drain(0)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    def __iter__(self) -> Iterator[LeadRow | Problem]:
        for row in self.staged():
            line, email, first, last, company, title, tz, custom, p_field, p_reason, p_action = row
            problem = Problem(line, p_field, p_reason, p_action) if p_field is not None else None
            if email is None:
                assert problem is not None
                yield problem
            else:
                yield LeadRow(line, email, first, last, company, title, tz, problem,
                              json.loads(custom))


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
    """Return where the fields of rows under ``headers`` (a CSV file's header row, or a SQL
    source's column names) are, for :func:`_check_record`.

    :param source: the file (or source) named in errors.
    :param campaign: its ``columns:`` mapping (tried before the built-in aliases),
        ``custom_columns`` (required) and subjects (see :func:`subject_custom_columns`);
        ``None``: the built-in aliases only.
    :param hint: appended to the no-email-column error (how the file was read).
    :raises ImportFileError: no email column (the headers found are listed), or a declared
        custom column is missing (line 1 and the field named).
    """
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
    """``(field, reason)`` when the headers this row's messages would carry — To with the display
    name, every step's Subject rendered for it — break the rule the builder applies
    (:func:`outreach.message.lead_header_problem`), though each value alone passed it.

    Values without ``=`` or ``?`` cannot start or end an RFC 2047 encoded word, so only such rows
    (or campaigns whose subject text itself holds ``=?``) are rendered and checked: the common
    row costs one scan of its values.
    """
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
    """Check and clean one CSV record: the rules of a lead row, in this order (the first
    problem found makes the row a problem).

    A row of blank cells is no row (``None``). A NUL byte, more cells than the header, an empty
    or invalid address (:func:`outreach.addresses.normalize_address`), an address or a field
    unsafe in a header (:func:`outreach.message.header_text_problem`: they are written in To:
    and Subject) or a field longer than :data:`_MAX_FIELD` characters skip the row, as does an
    extra column over :data:`MAX_CUSTOM_FIELD` (or all of them over :data:`MAX_CUSTOM_TOTAL`),
    one a subject renders that is unsafe in a header, or a required one blank, or headers that
    are unsafe once the values are put together (:func:`_combined_header_problem`: the To display
    name and every step's Subject, checked as the message builder checks them); an unknown
    time zone only drops that field. A pure function of its arguments, so it can run in any process.
    """
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


def open_leads_csv(path: str | Path, campaign: campaign_mod.Campaign | None = None, *,
                   encoding: str | None = None, delimiter: str | None = None) -> LeadsCsv:
    """Open a leads CSV for reading row by row (see :class:`LeadsCsv`).

    :param path: the CSV file.
    :param campaign: its ``columns``, ``custom_columns`` and ``csv`` apply.
    :param encoding: ``auto`` (default), ``utf-8``, ``cp1252`` or ``utf-16``; overrides the
        campaign's.
    :param delimiter: ``auto`` (default), ``,``, ``;`` or ``tab``; overrides the campaign's.
    :raises ImportFileError: the file cannot be read, is empty, or has no email column.
    """
    return LeadsCsv(path, campaign, encoding=encoding, delimiter=delimiter)


def progress_line(file: str, rows: int, seconds: float) -> str:
    """Return the progress line of a long import: ``import leads.csv: 50,000 rows read
    (9,800 rows/s)``."""
    rate = f"{rows / seconds:,.0f} rows/s" if seconds > 0 else "rate unknown"
    return f"import {file}: {rows:,} rows read ({rate})"


STAGE_BATCH = 10_000
"""Rows of a CSV import copied into the stage table at a time: each batch's suppression is asked
(``lead_stage_mark_suppressed``, one PostgreSQL core) while the next batch is read and checked
(this process), so the two overlap; at most one batch waits in memory."""


def _stage_rows(conn: Any, leads: LeadsCsv, progress: Callable[[int, float], None] | None,
                every: int, workers: int, seconds: dict[str, float] | None = None) -> None:
    """COPY every row of ``leads`` into the stage table as it is read, :data:`STAGE_BATCH` rows
    a COPY, checked in ``workers`` processes (see :meth:`LeadsCsv.staged`), and mark each batch's
    suppressed rows in a second thread while the next batch is read (the connection is used by
    one thread at a time: a batch is copied once the previous batch's statement returned); call
    ``progress(rows read, seconds since the start)`` every ``every`` rows. On return every staged
    row's suppression is decided; an error of either side is raised here. ``seconds`` (if given)
    gets the wall seconds spent writing the COPY (``copy``) and waiting for a batch's
    suppression (``suppression``): the rest of the call is reading and checking."""
    from concurrent.futures import Future, ThreadPoolExecutor

    start, next_at = time.monotonic(), every
    batch: list[StagedRow] = []
    asked: Future[None] | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="outreach-import-suppression") as db_thread:

        spent = seconds if seconds is not None else {}

        def wait(future: Future[None]) -> None:
            start = time.monotonic()
            future.result()  # the connection is free again (and its error raised here)
            spent["suppression"] = spent.get("suppression", 0.0) + time.monotonic() - start

        def flush() -> Future[None]:
            if asked is not None:
                wait(asked)
            start = time.monotonic()
            with leads_store.lead_stage_copy(conn) as copy:
                for row in batch:
                    copy.write_row(row)
            spent["copy"] = spent.get("copy", 0.0) + time.monotonic() - start
            return db_thread.submit(leads_store.lead_stage_mark_suppressed, conn,
                                    from_line=batch[0][0], to_line=batch[-1][0])

        for row in leads.staged(workers):
            if progress is not None and leads.rows_total >= next_at:
                progress(leads.rows_total, time.monotonic() - start)
                next_at += every
            batch.append(row)
            if len(batch) >= STAGE_BATCH:
                asked, batch = flush(), []
        if batch:
            asked = flush()
        if asked is not None:
            wait(asked)


def import_workers(path: Path) -> int:
    """Return how many processes check the rows of ``path``: none (this process) for a file under
    :data:`PARALLEL_FROM_BYTES`, inside a daemonic process (a Celery prefork worker may not have
    children) or on fewer than 4 CPUs, else one per CPU but the reader's, at most
    :data:`MAX_WORKERS`. On 2 cores the workers measured no faster than one process (60,000
    rows: 10–12 s against 8.5–9 s, 2026-12-01, before the domain check was remembered per domain
    in :func:`outreach.addresses.normalize_address`, which made the checks three times cheaper):
    the reader, the COPY and PostgreSQL need the same cores, and the rows travel to the workers
    and back."""
    import multiprocessing
    import os

    if multiprocessing.current_process().daemon:
        return 0
    try:
        if path.stat().st_size < PARALLEL_FROM_BYTES:
            return 0
    except OSError:
        return 0
    cpus = os.cpu_count() or 1
    return 0 if cpus < 4 else min(cpus - 1, MAX_WORKERS)


def import_leads(url: str, campaign_file: str | Path, mailbox_file: str | Path,
                 csv_file: str | Path, *, now: dt.datetime | None = None,
                 progress: Callable[[int, float], None] | None = None,
                 progress_every: int = PROGRESS_ROWS, workers: int | None = None) -> ImportResult:
    """Import a leads CSV into a campaign, in one transaction, streaming the file.

    Rows are validated as they are read and COPY'd into a temporary stage table; in-file
    duplicates (the first line of each normalised address wins), suppression, the lead upsert
    and enrolment are then set-based statements that return counts. Memory does not grow with
    the file; ``result.problems`` holds at most :data:`PROBLEMS_SHOWN` problems (all of them
    are stored in ``outreach.import_runs``).

    :param url: outreach database URL.
    :param campaign_file: the campaign YAML (synced first, so a new campaign just works).
    :param mailbox_file: the mailbox YAML.
    :param csv_file: the leads CSV, inside an import folder (see :func:`import_path`; a relative
        path is relative to the project root).
    :param now: enrolment time (UTC); default the database clock.
    :param progress: called as ``progress(rows read, seconds)`` every ``progress_every`` rows
        while the file is read (see :func:`progress_line`); the CLI prints it, the Airflow task
        logs it.
    :param workers: processes that check the rows (0: this one); default
        :func:`import_workers` (parallel for big files). The result is the same either way.
    :raises ImportFileError: the CSV is outside the import folders, or as a whole unusable (file
        and line named); nothing is imported.
    :raises outreach.campaign.ConfigError: a configuration file is invalid.
    """
    campaign_path, csv_path = resolve(campaign_file), import_path(csv_file)
    campaign = campaign_mod.load_campaign(campaign_path)
    mailboxes = campaign_mod.load_mailboxes(mailbox_file)
    with open_leads_csv(csv_path, campaign) as leads, db.transaction(url) as conn:
        n = import_workers(csv_path) if workers is None else workers
        return apply_staged(conn, campaign, mailboxes, str(campaign_file), str(csv_file),
                            lambda spent: _stage_rows(conn, leads, progress, progress_every,
                                                      n, spent)
                            or (leads.rows_total, leads.invalid), now=now,
                            stage_decides_suppression=True)


def apply_staged(conn: Any, campaign: campaign_mod.Campaign, mailboxes: list[campaign_mod.Mailbox],
                 campaign_file: str, name: str,
                 stage: Callable[[dict[str, float]], tuple[int, int]], *,
                 now: dt.datetime | None = None,
                 stage_decides_suppression: bool = False) -> ImportResult:
    """The import pipeline after reading, inside the caller's transaction ``conn``: sync the
    campaign, create the stage table, call ``stage(spent)`` (it COPYs the rows in, see
    :data:`StagedRow`, returns ``(rows read, rows skipped)`` and may add to ``spent`` the seconds
    of its ``copy`` and of its ``suppression`` waits), then mark suppressed addresses
    and in-file duplicates, upsert the leads, enrol them and store the run — set-based
    statements returning counts. A CSV file (:func:`import_leads`) and a campaign's declared
    source (:mod:`outreach.sources`) both come through here.

    :param name: the file or source named in the run and the summary.
    :param stage_decides_suppression: ``stage()`` has asked ``lead_stage_mark_suppressed`` for
        every row it staged (:func:`_stage_rows`, batch by batch); else it is asked here for all.
    :returns: the result, ``run_id`` set.
    """
    result = ImportResult(file=name, campaign_key=campaign.key)
    # An erasure waits for this import (its suppression check would miss one committed later).
    leads_store.lead_import_hold_off_erasure(conn)
    campaign_id = campaign_mod.sync(conn, campaign, mailboxes, campaign_file)
    result.campaign_id = campaign_id
    leads_store.lead_stage_create(conn)
    leads_store.lead_stage_memory(conn)
    leads_store.lead_stage_index_lines(conn)
    clock = time.monotonic()

    def lap(stage_name: str) -> None:
        nonlocal clock
        result.seconds[stage_name] = time.monotonic() - clock
        clock = time.monotonic()

    spent: dict[str, float] = {}
    result.rows_total, result.invalid = stage(spent)
    lap("read")
    result.seconds["read"] -= spent.get("copy", 0.0) + spent.get("suppression", 0.0)
    result.seconds["copy"] = spent.get("copy", 0.0)
    if not stage_decides_suppression:
        leads_store.lead_stage_mark_suppressed(conn, from_line=None, to_line=None)
    lap("suppression")
    result.seconds["suppression"] += spent.get("suppression", 0.0)
    leads_store.lead_stage_analyze(conn)
    leads_store.lead_stage_mark_duplicates(conn)
    result.not_enrolled = leads_store.lead_stage_mark_campaign_finished(conn,
                                                                        campaign_id=campaign_id)
    counts = leads_store.lead_stage_counts(conn)
    result.duplicate, result.suppressed = counts.duplicate, counts.suppressed
    lap("duplicates")
    upserted = leads_store.lead_upsert_staged(conn)
    result.imported, result.updated = upserted.imported, upserted.updated
    result.unchanged = counts.accepted - result.imported - result.updated
    lap("upsert")
    enrolled = enrollments_store.enrollment_insert_staged(conn, campaign_id=campaign_id, now=now)
    result.enrolled, result.overlap_skipped = enrolled.enrolled, enrolled.skipped
    lap("enrol")
    result.problems = [Problem(**asdict(r))
                       for r in leads_store.lead_stage_problems(conn, limit=PROBLEMS_SHOWN)]
    result.problems_omitted = counts.problems - len(result.problems)
    result.suppressed_lines = leads_store.lead_stage_suppressed_lines(conn, limit=PROBLEMS_SHOWN)
    result.run_id = import_runs.import_run_insert_staged(
        conn, stored=PROBLEMS_STORED, kind="leads", file=name, campaign_key=campaign.key,
        rows_total=result.rows_total, imported=result.imported, updated=result.updated,
        duplicate=result.duplicate, unchanged=result.unchanged, invalid=result.invalid,
        suppressed=result.suppressed, enrolled=result.enrolled)
    lap("record")
    log.info("import %s: seconds %s", name, result.timings())
    return result


def import_run(url: str, run_id: int, *, page: int = 1, page_size: int = 50,
               ) -> tuple[dict[str, Any], list[Problem]]:
    """Return an import run (its ``outreach.import_runs`` row without the problems, plus
    ``problems_stored``) and page ``page`` (1-based) of its stored problems, ``page_size`` a
    page, in the order they were stored (by line; suppressed lines last).

    :raises LookupError: there is no import run ``run_id``.
    :raises ValueError: ``page`` or ``page_size`` is below 1.
    """
    if page < 1 or page_size < 1:
        raise ValueError("--page and --page-size start at 1")
    with db.connect(url, autocommit=True) as conn:
        run = import_runs.import_run_get(conn, id=run_id)
        if run is None:
            raise LookupError(f"no import run {run_id} (outreach report shows the latest)")
        problems = [Problem(**asdict(r)) for r in import_runs.import_run_problems_page(
            conn, id=run_id, limit=page_size, offset=(page - 1) * page_size)]
    return asdict(run), problems
