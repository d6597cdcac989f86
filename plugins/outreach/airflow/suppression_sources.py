"""Do-not-contact sources (issue 26): ``suppressions:`` in the suppression sources file, read like a
campaign's lead ``source:`` (:mod:`outreach.sources`) and imported by
``outreach_import_suppression_sources``.

Entries go through :func:`outreach.suppression.apply_entries` (history source
``suppressions:<name>``); re-runs add nothing twice; an entry that leaves the source stays
suppressed, and one an operator unsuppressed comes back while the source has it.
docs/howto/suppressions.md."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from outreach import db
from outreach.airflow.who import airflow_who
from outreach.campaign import FileSource, SqlSource, _load, _Model
from outreach.leadfile import ImportFileError
from outreach.logutil import log, mask_addresses
from outreach.paths import resolve, suppression_sources_file
from outreach.sources import (
    SourceError,
    _regular_object,
    _sql_cursor,
    glob_objects,
    object_version,
)
from outreach.store import sources as sources_store
from outreach.store import suppressions as suppressions_store
from outreach.suppression import (
    REASONS,
    SuppressionImport,
    apply_entries,
    csv_entries,
    value_column,
)

ACTOR = "outreach_import_suppression_sources"
"""Who the history (``outreach.suppression_events.actor``) names for a source's entries."""


class SuppressionSource(_Model):
    """One do-not-contact source: ``name`` (a slug), one of ``sql`` and ``files``, the ``column`` of
    the address or domain (default email, domain, address or value, else the first) and ``reason``
    (default ``do-not-contact``: every message class honours it)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]{0,62}$")
    sql: SqlSource | None = None
    files: FileSource | None = None
    column: str | None = Field(default=None, min_length=1)
    reason: Literal[REASONS] = "do-not-contact"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _one_kind(self) -> SuppressionSource:
        if (self.sql is None) == (self.files is None):
            raise ValueError("a suppression source is either sql: {conn_id, query_file} or "
                             "files: {path}")
        return self

    @property
    def label(self) -> str:
        """``suppressions:<name>``: the ``source`` of its suppressions and their history."""
        return f"suppressions:{self.name}"


class SuppressionSourcesFile(_Model):
    """The suppression sources file: ``suppressions: [SuppressionSource, …]``, names unique."""

    suppressions: list[SuppressionSource] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> SuppressionSourcesFile:
        names = [s.name for s in self.suppressions]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"suppression source names must be unique, repeated: {twice}")
        return self


def load_sources(path: str | Path | None = None) -> list[SuppressionSource]:
    """Read the suppression sources file (default :func:`outreach.paths.suppression_sources_file`);
    ``[]`` when it does not exist. Files only: DAG parsing calls this.

    :raises outreach.campaign.ConfigError: the file is not YAML or invalid (line and field named).
    """
    file = resolve(path) if path is not None else suppression_sources_file()
    if not file.exists():
        return []
    return list(_load(file, SuppressionSourcesFile).suppressions)


def source_named(name: str, path: str | Path | None = None) -> SuppressionSource:
    """Return the source called ``name`` of the suppression sources file.

    :raises SourceError: no source has that name.
    :raises outreach.campaign.ConfigError: the file is invalid.
    """
    for s in load_sources(path):
        if s.name == name:
            return s
    raise SourceError(f"no suppression source named {name!r} in "
                      f"{resolve(path) if path else suppression_sources_file()}")


def import_source(url: str, source: SuppressionSource) -> list[SuppressionImport]:
    """Import one do-not-contact source: one result for a SQL source, one per new object of a file
    source (each in its own transaction); ``problems`` name the row and field.

    :raises SourceError: the query file cannot be read, or the declared column is not returned.
    :raises ImportFileError: objects unusable as a whole (the others are imported; they are tried
        again by the next run)."""
    if source.sql is not None:
        return [_import_sql(url, source)]
    return _import_files(url, source)


def _import_sql(url: str, source: SuppressionSource) -> SuppressionImport:
    from airflow.sdk import BaseHook

    sql = source.sql
    assert sql is not None
    try:
        query = resolve(sql.query_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"suppression source {source.name}, field sql.query_file: cannot read "
                          f"{sql.query_file}: {exc.strerror}") from None
    result = SuppressionImport(file=f"suppression source {source.name}", unit="row")
    dbconn = BaseHook.get_connection(sql.conn_id).get_hook().get_conn()
    cur = None
    try:
        cur = _sql_cursor(dbconn)
        cur.arraysize = sql.fetch_size
        cur.execute(query)
        first = cur.fetchmany(sql.fetch_size)  # a named cursor describes itself once it fetched
        headers = [str(d[0]) for d in cur.description]
        if source.column is not None:
            if source.column not in headers:
                raise SourceError(f"suppression source {source.name}, field column: the query "
                                  f"returns no column {source.column!r} (columns: {headers[:20]})")
            col = headers.index(source.column)
        else:
            col = value_column(headers) or 0

        def entries() -> Iterator[tuple[int, str, str]]:
            rows = itertools.chain.from_iterable(itertools.chain(
                [first], iter(lambda: cur.fetchmany(sql.fetch_size), [])))
            for n, row in enumerate(rows, start=1):
                value = row[col] if col < len(row) else None
                yield n, headers[col], "" if value is None else str(value)

        with db.transaction(url) as conn:
            suppressions_store.suppression_actor_set(conn, actor=ACTOR, note=source.label)
            apply_entries(conn, entries(), result, reason=source.reason, source=source.label,
                          who=airflow_who(ACTOR))
    finally:
        if cur is not None:
            cur.close()
        dbconn.close()
    report(result)
    return result


def report(result: SuppressionImport) -> None:
    """Log a committed import: each bad row (source, row or line, field; addresses masked), then
    one summary line."""
    for line in result.problem_lines():
        log.warning("%s", mask_addresses(line))
    if len(result.problems) > 100:
        log.warning("%s: %s more problems", result.file, len(result.problems) - 100)
    log.info("%s: added=%s known=%s invalid=%s cancelled=%s", result.file, result.added,
             result.known, result.invalid, result.cancelled)


def _import_files(url: str, source: SuppressionSource) -> list[SuppressionImport]:
    assert source.files is not None
    pattern = source.files.path
    results: list[SuppressionImport] = []
    failed: list[str] = []
    for obj in glob_objects(source.files):
        try:
            if not _regular_object(obj):
                continue
            result = _import_object(url, source, obj, object_version(obj.fs.info(obj.path)))
        except (ImportFileError, UnicodeDecodeError) as exc:
            # Rolled back with its claim: the object is tried again by the next run.
            log.error("suppression source %s, %s: %s", source.name, obj, exc)
            failed.append(str(obj))
            continue
        if result is not None:
            report(result)
            results.append(result)
    if failed:
        raise ImportFileError(f"suppression source {source.name}: {len(failed)} object(s) of "
                              f"{pattern} not imported (see the errors above; the next run tries "
                              f"again): {', '.join(failed[:5])}")
    return results


def _import_object(url: str, source: SuppressionSource, obj: Any,
                   version: str) -> SuppressionImport | None:
    """Claim and import one object in one transaction; ``None`` when it was imported before."""
    with db.transaction(url) as conn:
        claim = sources_store.source_object_claim(conn, campaign_key=source.label,
                                                  source=source.label, path=str(obj),
                                                  version=version)
        if claim is None:
            return None
        result = SuppressionImport(file=f"suppression source {source.name}, {obj}")
        with tempfile.TemporaryDirectory(prefix="outreach-dnc-") as tmp:
            local = Path(tmp) / "object.csv"
            with obj.open("rb") as src, local.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            with local.open("r", encoding="utf-8-sig", newline="") as f:
                suppressions_store.suppression_actor_set(conn, actor=ACTOR, note=source.label)
                apply_entries(conn, csv_entries(f, result.file), result, reason=source.reason,
                              source=source.label, who=airflow_who(ACTOR))
    return result
