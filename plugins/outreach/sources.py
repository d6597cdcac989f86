"""Leads from a campaign's declared source (``source:`` in the campaign file, issue 14).

A SQL source is a query through an Airflow SQL connection's common-sql hook, fetched in chunks;
a file source a glob of ``ObjectStoragePath`` objects. Either goes through the CSV importer's
pipeline (:func:`outreach.leads.apply_staged`). A lead is never deleted when its row leaves;
each file object is claimed once (``outreach.source_objects``). docs/howto/sources.md."""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from outreach import campaign as campaign_mod
from outreach import db
from outreach.leadcheck import _check_record, layout_for
from outreach.leadcsv import open_leads_csv
from outreach.leadfile import ImportFileError, regular_file
from outreach.leads import ImportResult, apply_staged
from outreach.logutil import log
from outreach.paths import resolve
from outreach.store import leads as leads_store
from outreach.store import sources as sources_store

STOPPED_BY = "outreach import-sources"


class SourceError(ValueError):
    """A campaign's source cannot be read (no source declared, the query file missing, the id
    column absent, the connection unusable); the message says what to fix."""


def lead_asset_uri(campaign_key: str) -> str:
    """Return the URI of the Asset the import updates for a campaign's leads
    (``outreach://leads/<campaign_key>``); ``outreach_queue_due`` is scheduled on these."""
    return f"outreach://leads/{campaign_key}"


def import_source(url: str, campaign_file: str | Path, mailbox_file: str | Path, *,
                  now: dt.datetime | None = None) -> list[ImportResult]:
    """Import a campaign's declared source: one result for a SQL source, one per new object of
    a file source (none when nothing is new).

    :raises SourceError: the campaign has no source, or it cannot be read.
    :raises outreach.leadfile.ImportFileError: the rows as a whole are unusable (no email column,
        a declared custom column missing, a file that does not decode); nothing of it imported.
    :raises outreach.campaign.ConfigError: a configuration file is invalid.
    """
    campaign = campaign_mod.load_campaign(campaign_file)
    if campaign.source is None:
        raise SourceError(f"{campaign_file}: no source: declared (sql: or files:)")
    mailboxes = campaign_mod.load_mailboxes(mailbox_file)
    if campaign.source.sql is not None:
        return [_import_sql(url, campaign, mailboxes, str(campaign_file), now)]
    return _import_files(url, campaign, mailboxes, str(campaign_file), now)


def _sql_cursor(dbconn: Any) -> Any:
    """A server-side (named) cursor where the driver has one (psycopg 2 and 3), else a plain
    cursor (the driver then fetches as its ``arraysize`` allows)."""
    try:
        return dbconn.cursor(name="outreach_source")
    except TypeError:
        return dbconn.cursor()


def _import_sql(url: str, campaign: campaign_mod.Campaign, mailboxes: list[campaign_mod.Mailbox],
                campaign_file: str, now: dt.datetime | None) -> ImportResult:
    from airflow.sdk import BaseHook

    source = campaign.source
    assert source is not None and source.sql is not None
    sql = source.sql
    try:
        query = resolve(sql.query_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"{campaign_file}, field source.sql.query_file: cannot read "
                          f"{sql.query_file}: {exc.strerror}") from None
    name = f"sql:{sql.conn_id}:{sql.query_file}"
    hook = BaseHook.get_connection(sql.conn_id).get_hook()
    dbconn = hook.get_conn()
    try:
        cur = _sql_cursor(dbconn)
        cur.arraysize = sql.fetch_size
        cur.execute(query)
        first = cur.fetchmany(sql.fetch_size)  # a named cursor describes itself once it fetched
        headers = [d[0] for d in cur.description]
        layout = layout_for(name, headers, campaign)
        i_key = layout.i_email
        if source.id_column is not None:
            if source.id_column not in headers:
                raise SourceError(f"{campaign_file}, field source.id_column: the query returns "
                                  f"no column {source.id_column!r} (columns: {headers[:20]})")
            i_key = headers.index(source.id_column)
        with db.transaction(url) as conn:
            def stage(_spent: dict[str, float]) -> tuple[int, int]:  # timed as a whole
                total = invalid = 0
                rows = itertools.chain.from_iterable(itertools.chain(
                    [first], iter(lambda: cur.fetchmany(sql.fetch_size), [])))
                with leads_store.lead_stage_copy_keyed(conn) as copy:
                    # line: the row's number in the query's result (1-based)
                    for n, row in enumerate(rows, start=1):
                        cells = ["" if v is None else str(v) for v in row]
                        staged = _check_record(layout, n, cells)
                        if staged is None:
                            continue
                        total += 1
                        invalid += staged[1] is None
                        key = cells[i_key].strip() if i_key < len(cells) else ""
                        copy.write_row((*staged, (key if source.id_column else key.lower()) or None))
                return total, invalid

            result = apply_staged(conn, campaign, mailboxes, campaign_file, name, stage, now=now)
            params = {"campaign_id": result.campaign_id, "run_id": result.run_id}
            sources_store.source_rows_record(conn, **params)
            sources_store.source_rows_seen(conn, **params)
            if source.stop_when_missing and result.rows_total:
                result.stopped = sources_store.source_rows_stop_missing(
                    conn, **params, reason=f"left the source {name}", by=STOPPED_BY)
    finally:
        dbconn.close()
    return result


def object_version(info: dict[str, Any]) -> str:
    """Return an object's version from its fsspec ``info``: the ETag (S3, GCS), else
    modification time and size (``mtime:size``; ``created`` where there is no mtime)."""
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    if etag:
        return f"etag:{str(etag).strip(chr(34))}"
    moment = info.get("mtime") or info.get("LastModified") or info.get("created") or info.get("updated")
    if isinstance(moment, dt.datetime):
        moment = moment.timestamp()
    return f"mtime:{moment}:size:{info.get('size')}"


def _import_files(url: str, campaign: campaign_mod.Campaign,
                  mailboxes: list[campaign_mod.Mailbox], campaign_file: str,
                  now: dt.datetime | None) -> list[ImportResult]:
    source = campaign.source
    assert source is not None and source.files is not None
    pattern = source.files.path
    results: list[ImportResult] = []
    failed: list[str] = []
    for obj in glob_objects(source.files):
        try:
            if not _regular_object(obj):
                continue
            info = obj.fs.info(obj.path)
            version = object_version(info)
            result = _import_object(url, campaign, mailboxes, campaign_file, pattern, obj,
                                    version, now)
        except ImportFileError as exc:
            # Rolled back with its claim: the object is tried again by the next run.
            log.error("%s", exc)
            failed.append(str(obj))
            continue
        if result is not None:
            results.append(result)
    if failed:
        raise ImportFileError(f"{len(failed)} object(s) of {pattern} not imported (see the errors "
                              f"above; fix or remove them, the next run tries again): "
                              f"{', '.join(failed[:5])}")
    return results


def glob_objects(files: campaign_mod.FileSource) -> list[Any]:
    """Return the ``ObjectStoragePath`` objects matching a file source's ``path`` (the glob in its
    last part; folders included, see :func:`_regular_object`), sorted by URI, through the store
    of ``files.conn_id``."""
    from airflow.sdk import ObjectStoragePath

    base, _, glob = files.path.rpartition("/")
    root = ObjectStoragePath(base + "/", conn_id=files.conn_id)
    return sorted(root.glob(glob or "*"), key=str)


def _regular_object(obj: Any) -> bool:
    """Whether ``obj`` of a file source's glob is an object to import (``False`` for a folder); a local
    path must be a regular file (:func:`outreach.leadfile.regular_file`).

    :raises ImportFileError: a local FIFO, device or socket (the path named)."""
    if obj.protocol in ("file", "local"):
        path = Path(obj.path)
        if path.is_dir():
            return False
        regular_file(path, str(obj))
        return True
    return bool(obj.is_file())


def _import_object(url: str, campaign: campaign_mod.Campaign,
                   mailboxes: list[campaign_mod.Mailbox], campaign_file: str, pattern: str,
                   obj: Any, version: str, now: dt.datetime | None) -> ImportResult | None:
    """Claim and import one object in one transaction; ``None`` when it was imported before."""
    with db.transaction(url) as conn:
        claim = sources_store.source_object_claim(conn, campaign_key=campaign.key, source=pattern,
                                                  path=str(obj), version=version)
        if claim is None:
            return None
        with tempfile.TemporaryDirectory(prefix="outreach-source-") as tmp:
            # Through the object store's own read (the same for s3:// as for file://): the CSV
            # reader then detects encoding and delimiter on a local copy.
            local = Path(tmp) / (obj.name or "object.csv")
            with obj.open("rb") as src, local.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            with open_leads_csv(local, campaign) as leads:
                from outreach.leads import _stage_rows

                result = apply_staged(conn, campaign, mailboxes, campaign_file, str(obj),
                                      lambda spent: _stage_rows(conn, leads, None, 1 << 62,
                                                                0, spent)
                                      or (leads.rows_total, leads.invalid), now=now,
                                      stage_decides_suppression=True)
        sources_store.source_object_done(conn, id=claim, run_id=result.run_id)
    return result


def source_campaigns() -> list[tuple[str, campaign_mod.Campaign]]:
    """Return ``(file, campaign)`` for every campaign file of :func:`outreach.paths.campaigns_dir`
    that declares a source, by file name. Files only: DAG parsing calls this.

    :raises outreach.campaign.ConfigError: a campaign file with a source is invalid.
    """
    from outreach.paths import campaigns_dir

    out = []
    for path in sorted(campaigns_dir().glob("*.yaml")):
        if "source:" not in path.read_text(encoding="utf-8-sig"):
            continue
        campaign = campaign_mod.load_campaign(path)
        if campaign.source is not None:
            out.append((str(path), campaign))
    return out


def is_asset_uri(schedule: str | None) -> bool:
    """Whether a campaign's ``schedule`` names an Asset (a URI such as ``dbt://…``) rather than
    a cron expression or preset."""
    return bool(schedule) and "://" in schedule
