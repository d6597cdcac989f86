"""Leads from a campaign's declared source (issue 14): a warehouse table in a second PostgreSQL
database read through an Airflow connection (conn type postgres, common-sql hook), files read
through ObjectStoragePath (``file://``, and fsspec's in-memory store for the object-store path
without network), each object once across re-runs, retries and concurrent runs. The import DAG under real
Airflow: tests/dags/test_source_dags.py."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from outreach.leadfile import ImportFileError
from outreach.sources import import_source
from support.flow import rows, scalar
from support.paths import MAILBOXES
from support.sources import WAREHOUSE_ROWS, drop, file_campaign, sql_campaign


def test_a_warehouse_table_twice_then_ten_changed_rows(db_url, warehouse, tmp_path):
    wh_url, _ = warehouse
    campaign = sql_campaign(tmp_path / "campaigns", stop=True)
    [first] = import_source(db_url, campaign, MAILBOXES)
    assert (first.rows_total, first.imported, first.invalid) == (WAREHOUSE_ROWS, WAREHOUSE_ROWS, 0)
    assert first.enrolled == WAREHOUSE_ROWS
    assert scalar(db_url, "SELECT custom->>'city' FROM outreach.leads WHERE email = 'lead7@corp7.example'") == "City 7"
    [again] = import_source(db_url, campaign, MAILBOXES)
    assert (again.imported, again.updated, again.unchanged, again.enrolled) == (0, 0, WAREHOUSE_ROWS, 0)

    with psycopg.connect(wh_url) as c:
        c.execute("UPDATE crm_leads SET city = 'Moved' WHERE crm_id <= 10")
        c.execute("UPDATE crm_leads SET active = false WHERE crm_id BETWEEN 11 AND 13")  # left it
    [changed] = import_source(db_url, campaign, MAILBOXES)
    assert (changed.imported, changed.updated, changed.stopped) == (0, 10, 3)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads WHERE custom->>'city' = 'Moved'") == 10
    # Left the source: not deleted, only the enrolment stopped (by the one stop function).
    assert rows(db_url, "SELECT l.email, e.status, e.stopped_by FROM outreach.leads l "
                "JOIN outreach.enrollments e ON e.lead_id = l.id WHERE l.email LIKE 'lead1_@%%' "
                "AND l.email IN ('lead11@corp11.example', 'lead12@corp12.example') ORDER BY 1") == [
        {"email": "lead11@corp11.example", "status": "stopped", "stopped_by": "outreach import-sources"},
        {"email": "lead12@corp12.example", "status": "stopped", "stopped_by": "outreach import-sources"}]
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == WAREHOUSE_ROWS
    [still] = import_source(db_url, campaign, MAILBOXES)
    assert (still.updated, still.stopped) == (0, 0)


def test_a_sql_source_missing_a_declared_column_imports_nothing(db_url, warehouse, tmp_path):
    campaign = sql_campaign(tmp_path / "campaigns")
    (tmp_path / "campaigns" / "leads_q4.sql").write_text("SELECT work_email, first_name FROM crm_leads")
    with pytest.raises(ImportFileError, match=r"sql:warehouse:.*leads_q4\.sql, line 1, field city: "
                                              r"a column the campaign needs"):
        import_source(db_url, campaign, MAILBOXES)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0


def test_file_source_imports_each_object_once_across_reruns_and_concurrent_runs(db_url, tmp_path):
    inbox = tmp_path / "inbox"
    drop(inbox, "a.csv", 5)
    drop(inbox, "b.csv", 5, start=5)
    (inbox / "notes.txt").write_text("not matched by the glob")
    campaign = file_campaign(tmp_path / "campaigns", f"file://{inbox}/*.csv")
    first = import_source(db_url, campaign, MAILBOXES)
    assert sorted((r.file.rsplit("/", 1)[1], r.imported) for r in first) == [("a.csv", 5), ("b.csv", 5)]
    assert import_source(db_url, campaign, MAILBOXES) == []  # a re-run / retry: nothing
    drop(inbox, "c.csv", 7, start=10)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(import_source(db_url, campaign, MAILBOXES)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 1]  # c.csv once, by one of the two runs
    assert scalar(db_url, "SELECT count(*) FROM outreach.source_objects") == 3
    assert scalar(db_url, "SELECT count(*) FROM outreach.import_runs") == 3
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 17
    # A changed object (new mtime/size) is a new version: imported, its known rows unchanged.
    with (inbox / "a.csv").open("a") as f:
        f.write("new@drop.example;Drop Ltd;Bonn\n")
    [changed] = import_source(db_url, campaign, MAILBOXES)
    assert (changed.imported, changed.unchanged) == (1, 5)


def test_file_source_through_an_object_store_without_a_local_path(db_url, tmp_path):
    """Fsspec's in-memory store stands for s3:// or gs:// (no network): listing, info (no
    local path), and the streamed read are the object-store calls."""
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.io import attach
    from fsspec.implementations.memory import MemoryFileSystem

    attach("memory", fs=MemoryFileSystem())  # as a provider registers s3 or gcs
    bucket = f"memory://bucket-{uuid.uuid4().hex[:8]}/leads"
    (ObjectStoragePath(bucket) / "one.csv").write_text("Email,Company\nm1@mem.example,Mem\n")
    (ObjectStoragePath(bucket) / "two.csv").write_bytes(
        "E-Mail;Firma\r\nm2@mem.example;Müller\r\n".encode("cp1252"))
    campaign = file_campaign(tmp_path / "campaigns", f"{bucket}/*.csv", key="memory-q4")
    campaign.write_text(campaign.read_text().replace("source:", "columns: {E-Mail: email, Firma: company}\nsource:"))
    assert sum(r.imported for r in import_source(db_url, campaign, MAILBOXES)) == 2
    assert import_source(db_url, campaign, MAILBOXES) == []
    assert scalar(db_url, "SELECT company FROM outreach.leads WHERE email = 'm2@mem.example'") == "Müller"
    paths = [r["path"] for r in rows(db_url, "SELECT path FROM outreach.source_objects ORDER BY path")]
    assert paths == [f"{bucket}/one.csv", f"{bucket}/two.csv"]


def test_a_bad_object_fails_alone_and_is_tried_again(db_url, tmp_path):
    inbox = tmp_path / "inbox"
    drop(inbox, "good.csv", 3)
    (inbox / "bad.csv").write_bytes(b"Name\nx\n")  # no email column
    campaign = file_campaign(tmp_path / "campaigns", f"file://{inbox}/*.csv")
    with pytest.raises(ImportFileError, match=r"1 object\(s\) of file://.* not imported.*bad\.csv"):
        import_source(db_url, campaign, MAILBOXES)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 3
    assert scalar(db_url, "SELECT count(*) FROM outreach.source_objects") == 1  # not bad.csv
    drop(inbox, "bad.csv", 2, start=100)
    assert [r.imported for r in import_source(db_url, campaign, MAILBOXES)] == [2]
