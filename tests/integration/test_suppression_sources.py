"""Do-not-contact sources (issue 26): a ``dnc`` table in the "warehouse" (a second real PostgreSQL
database, Airflow connection ``warehouse``) and do-not-contact CSVs read through ObjectStoragePath,
imported through the one suppression import path; messages counted at a real aiosmtpd sink. The
DAG under real Airflow: tests/dags/test_source_dags.py."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psycopg
import pytest

from outreach import db
from outreach.airflow.suppression_sources import import_source, source_named
from outreach.queue import queue_due
from outreach.suppression import is_suppressed, unsuppress
from support import invariants
from support.flow import EXPECTED_LEADS, import_demo, rows, scalar, send_all

CAMPAIGN_KEY = "q4-ops-intro"


def dnc_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wh_url: str,
                entries: list[str | None], *, extra: str = "") -> Path:
    """A ``dnc`` table (row order = ``entries``) in the warehouse, a query file reading it and a
    suppression sources file declaring it as ``crm-dnc`` (OUTREACH_SUPPRESSION_SOURCES)."""
    with psycopg.connect(wh_url) as c:
        c.execute("CREATE TABLE dnc (n serial PRIMARY KEY, email text, added_by text)")
        for e in entries:
            c.execute("INSERT INTO dnc (email, added_by) VALUES (%s, 'crm')", (e,))
    query = tmp_path / "dnc.sql"
    query.write_text("SELECT email, added_by FROM dnc ORDER BY n\n")
    path = tmp_path / "suppression_sources.yaml"
    path.write_text("suppressions:\n"
                    f"  - name: crm-dnc\n    sql: {{conn_id: warehouse, query_file: {query}}}\n"
                    + extra)
    monkeypatch.setenv("OUTREACH_SUPPRESSION_SOURCES", str(path))
    return path


def events(db_url: str) -> list[dict]:
    return rows(db_url, "SELECT action, value, reason, source, actor FROM outreach.suppression_events "
                        "WHERE source LIKE 'suppressions:%%' ORDER BY id")


def test_a_dnc_table_in_the_warehouse_suppresses_a_lead_before_its_next_step(
        db_url, warehouse, sink, settings, tmp_path, monkeypatch):
    wh_url, _ = warehouse
    import_demo(db_url)
    queue_due(db_url)
    send_all(db_url, settings)
    assert len(sink.messages()) == EXPECTED_LEADS  # step 1 to every lead
    early, late = sorted(r["email"] for r in rows(
        db_url, "SELECT email FROM outreach.leads ORDER BY id LIMIT 2"))
    # The CRM marks one lead do-not-contact before step 2 is queued (written as the CRM does).
    dnc_sources(tmp_path, monkeypatch, wh_url, [early.upper()])
    [first] = import_source(db_url, source_named("crm-dnc"))
    assert (first.added, first.known, first.invalid, first.cancelled) == (1, 0, 0, 0)

    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3, minutes=5)
    assert queue_due(db_url, now=later)["queued"] == EXPECTED_LEADS - 1
    # The other is marked after its step 2 was queued: the import cancels it.
    with psycopg.connect(wh_url) as c:
        c.execute("INSERT INTO dnc (email) VALUES (%s)", (late,))
    [second] = import_source(db_url, source_named("crm-dnc"))
    assert (second.added, second.known, second.cancelled) == (1, 1, 1)

    send_all(db_url, settings, now=later)
    messages = sink.messages()
    invariants.assert_ok(db_url, messages)
    step2 = [m["X-RcptTo"] for m in messages if m["X-Outreach-Step"] == f"{CAMPAIGN_KEY}/2"]
    assert len(step2) == EXPECTED_LEADS - 2 and early not in step2 and late not in step2
    assert scalar(db_url, "SELECT e.status::text FROM outreach.emails e JOIN outreach.leads l "
                          "ON l.id = e.lead_id WHERE l.email = %s AND e.status <> 'sent'",
                  (late,)) == "suppressed"
    # History: one 'suppress' event per entry, the source named.
    assert events(db_url) == [
        {"action": "suppress", "value": v, "reason": "do-not-contact", "source": "suppressions:crm-dnc",
         "actor": "outreach_import_suppression_sources"} for v in (early, late)]


def test_a_row_removed_from_the_source_stays_suppressed_and_reruns_add_nothing(
        db_url, warehouse, tmp_path, monkeypatch):
    wh_url, _ = warehouse
    dnc_sources(tmp_path, monkeypatch, wh_url, ["gone@left.example", "@whole-domain.example"])
    source = source_named("crm-dnc")
    [first] = import_source(db_url, source)
    assert (first.added, first.known) == (2, 0)
    [again] = import_source(db_url, source)
    assert (again.added, again.known) == (0, 2)
    assert len(events(db_url)) == 2  # a re-run adds nothing, not even history

    with psycopg.connect(wh_url) as c:
        c.execute("DELETE FROM dnc")  # both rows leave the source
    [empty] = import_source(db_url, source)
    assert (empty.added, empty.known) == (0, 0)
    with db.connect(db_url) as conn:
        assert is_suppressed(conn, "gone@left.example")
        assert is_suppressed(conn, "anyone@whole-domain.example")
    assert len(events(db_url)) == 2
    # Only an operator unsuppresses (who and why recorded); the source does not bring it back.
    with db.transaction(db_url) as conn:
        assert unsuppress(conn, "gone@left.example", actor="Dana (ops)", note="TICKET-7").removed
    import_source(db_url, source)
    with db.connect(db_url) as conn:
        assert not is_suppressed(conn, "gone@left.example")
    assert [e["action"] for e in events(db_url)] == ["suppress", "suppress", "unsuppress"]


def test_a_bad_row_is_reported_with_source_row_and_field_and_the_others_imported(
        db_url, warehouse, tmp_path, monkeypatch, caplog):
    wh_url, _ = warehouse
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "legal.csv").write_text("Email,Note\nlegal1@firm.example,x\njane at firm,y\n"
                                     "legal2@firm.example,z\n", encoding="utf-8")
    (inbox / "broken.csv").write_bytes(b"email\n\xff\xfe\x00bad@bytes.example\n")
    dnc_sources(tmp_path, monkeypatch, wh_url,
                ["ok1@crm.example", "not-an-address", None, "a@@b.example", "x\x01y", "ok2@crm.example"],
                extra=f"  - name: legal\n    files: {{path: \"file://{inbox}/*.csv\"}}\n"
                      f"    reason: manual\n")
    [crm] = import_source(db_url, source_named("crm-dnc"))
    assert (crm.added, crm.invalid) == (2, 3)
    assert [(p.line, p.field) for p in crm.problems] == [(2, "email"), (4, "email"), (5, "email")]
    assert crm.problem_lines()[0].startswith("suppression source crm-dnc, row 2, field email: ")

    with pytest.raises(Exception, match=r"suppression source legal: 1 object\(s\) .*broken\.csv"):
        import_source(db_url, source_named("legal"))
    assert rows(db_url, "SELECT value, reason, source FROM outreach.suppressions "
                        "WHERE source = 'suppressions:legal' ORDER BY value") == [
        {"value": f"legal{i}@firm.example", "reason": "manual", "source": "suppressions:legal"}
        for i in (1, 2)]
    logged = [r.getMessage() for r in caplog.records]
    assert any("suppression source legal, " in m and "legal.csv, line 3, field email: " in m
               for m in logged), logged
    # The good object was claimed: a re-run reads only the broken one again.
    with pytest.raises(Exception, match="broken"):
        import_source(db_url, source_named("legal"))
    (inbox / "broken.csv").unlink()
    assert import_source(db_url, source_named("legal")) == []
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions") == 4
