"""Opening a lead (or do-not-contact) file safely: inside the import roots, a regular file only,
its encoding and delimiter, and rows of bounded length (see :mod:`outreach.leads` for the import).
"""

from __future__ import annotations

import codecs
import csv
import os
import re
import stat
from pathlib import Path
from typing import IO, Any

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

    Checked with ``stat``, which opens nothing (a FIFO would block, a device never ends).

    :param shown: the path as the user gave it, named in the error (default ``path``).
    :raises ImportFileError: it is a FIFO, a device, a socket or a folder."""
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

    Opened ``O_NONBLOCK`` and decided by ``fstat``, so a FIFO swapped in after
    :func:`regular_file` cannot block the run.

    :param mode: ``"r"`` or ``"rb"``; ``kwargs`` as for :func:`open`.
    :raises ImportFileError: the opened file is not a regular file (nothing read from it).
    :raises ValueError: ``mode`` is not a reading mode.
    :raises OSError: it cannot be opened."""
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
    """Iterate the lines of a text file opened with ``newline=""``, none over ``limit`` characters
    (``readline(limit + 1)``: memory bounded); :meth:`new_row` makes a row's lines count together.

    ``line`` is the number of the last line returned.

    :raises ImportFileError: (while iterating) a line or a row is too long (file and line named)."""

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
                "(outreach.leadfile.MAX_ROW_CHARS): no line breaks, or not a CSV export?; "
                "nothing was imported")
        return str(text)


def import_path(path: str | Path, *, base: Path | None = None,
                roots: tuple[Path, ...] | None = None,
                hint: str = "move the file there or add its folder to OUTREACH_IMPORT_ROOTS") -> Path:
    """Return the file to import for ``path``: absolute (relative to ``base``, default the project
    root), resolved, and inside one of ``roots`` (default :func:`outreach.settings.import_roots`).

    A file outside is never opened and the message does not say whether it exists; ``hint`` ends it.

    :raises ImportFileError: outside every root, or not a regular file (:func:`regular_file`).
    :raises outreach.settings.SettingsError: ``OUTREACH_IMPORT_ROOTS`` is invalid."""
    from outreach.paths import project_root
    from outreach.settings import import_roots

    roots = import_roots() if roots is None else roots
    given = Path(path).expanduser()
    real = (given if given.is_absolute() else (base or project_root()) / given).resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise ImportFileError(f"{path}: not inside an import folder ({', '.join(map(str, roots))}); "
                              f"{hint}")
    return regular_file(real, path)


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
    """Return the codec to read ``path`` with: ``declared`` unless ``auto``; else by BOM, else UTF-8 if
    the first 64 KiB decode, else Windows-1252 (a later bad byte is an error naming its line).

    :raises OSError: the file cannot be read."""
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
