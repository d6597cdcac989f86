"""Reading a leads CSV row by row (:class:`LeadsCsv`): the file opened by :mod:`outreach.leadfile`,
each row checked by :mod:`outreach.leadcheck`, in this process or in worker processes.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

from outreach import campaign as campaign_mod
from outreach.leadcheck import (
    LeadRow,
    Problem,
    StagedRow,
    _check_chunk,
    _check_record,
    _Layout,
    _problem_row,
    layout_for,
)
from outreach.leadfile import (
    _ENCODING_NAMES,
    BoundedLines,
    ImportFileError,
    _first_bad_byte,
    detect_delimiter,
    detect_encoding,
    open_regular,
    regular_file,
)


class LeadsCsv:
    """A leads CSV (header row first) opened for reading row by row, one row in memory at a time.

    Encoding and delimiter from the campaign's ``csv:`` or detected. Iterating yields a
    :class:`LeadRow` or a :class:`Problem` per data row, in file order; blank lines yield nothing.
    Attributes: ``path``, ``encoding``, ``delimiter``, ``headers``, ``columns``, ``custom``,
    ``rows_total``, ``invalid``.

    :raises ImportFileError: (on opening) unreadable, empty, a header that does not decode, no email
        column or a declared custom column missing; (iterating) a line that does not decode."""

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

        With ``workers`` ≥ 2 the rows are checked in that many processes, ``chunk`` records at a time,
        at most ``2 × workers`` chunks in flight; the result is the same as with 0.

        :raises ImportFileError: a line is not UTF-8 (the line is named)."""
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


def open_leads_csv(path: str | Path, campaign: campaign_mod.Campaign | None = None, *,
                   encoding: str | None = None, delimiter: str | None = None) -> LeadsCsv:
    """Open a leads CSV for reading row by row (see :class:`LeadsCsv`).

    :param campaign: its ``columns``, ``custom_columns`` and ``csv`` apply.
    :param encoding: ``auto``, ``utf-8``, ``cp1252`` or ``utf-16``; overrides the campaign's.
    :param delimiter: ``auto``, ``,``, ``;`` or ``tab``; overrides the campaign's.
    :raises ImportFileError: the file cannot be read, is empty, or has no email column."""
    return LeadsCsv(path, campaign, encoding=encoding, delimiter=delimiter)
