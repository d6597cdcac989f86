"""Streamed import (real PostgreSQL): in-file duplicates found in SQL (first line wins), counts
computed in SQL, every problem stored in import_runs, a bounded list returned, one transaction."""

from __future__ import annotations

import json

import pytest

from conftest import CAMPAIGN, MAILBOXES
from flow import rows, scalar
from outreach import db, leads
from outreach.leads import ImportFileError, import_leads
from outreach.suppression import suppress

CSV = ("Email,First Name,Company,Time Zone\n"
       "ok1@acme.example,Ok,Acme,Europe/Berlin\n"          # line 2
       "not-an-email,Bad,Acme,\n"                          # line 3
       ",Empty,Acme,\n"                                    # line 4
       "OK1@ACME.example,Dup,Acme,\n"                      # line 5: duplicate of line 2
       "ok1@acme.example,Dup2,Acme,Mars/Olympus\n"         # line 6: duplicate (zone not reported)
       "ok2@acme.example,Ok2,Acme,Mars/Olympus\n"          # line 7: zone ignored
       "blocked@acme.example,Blocked,Acme,\n"              # line 8: suppressed
       "ok3@acme.example,Ok3,Acme,\n")                     # line 9


def latest_run(url: str) -> dict:
    with db.connect(url, autocommit=True) as conn:
        return db.one(conn, "import_run_latest", {"kind": "leads"})


def test_duplicates_counts_and_problems_come_from_sql(db_url, tmp_path):
    with db.transaction(db_url) as conn:
        suppress(conn, "blocked@acme.example", "unsubscribed", "test")
    path = tmp_path / "leads.csv"
    path.write_text(CSV, encoding="utf-8")
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert (r.rows_total, r.imported, r.updated, r.unchanged, r.duplicate, r.invalid,
            r.suppressed, r.enrolled) == (8, 3, 0, 0, 2, 2, 1, 3)
    assert [(p.line, p.field, p.action) for p in r.problems] == [
        (3, "email", "skipped"), (4, "email", "skipped"), (5, "email", "skipped"),
        (6, "email", "skipped"), (7, "timezone", "ignored")]
    assert [p.reason for p in r.problems][2:4] == ["duplicate of line 2", "duplicate of line 2"]
    assert r.problems_omitted == 0 and r.suppressed_lines == [8]
    # The first line of an address wins: its fields are stored, the duplicate's are not.
    assert scalar(db_url, "SELECT first_name FROM outreach.leads WHERE email = 'ok1@acme.example'") == "Ok"
    stored = latest_run(db_url)
    assert stored["problems"] == [
        {"line": p.line, "field": p.field, "reason": p.reason, "action": p.action} for p in r.problems
    ] + [{"line": 8, "field": "email", "reason": "suppressed", "action": "skipped"}]
    assert (stored["rows_total"], stored["imported"], stored["duplicate"], stored["invalid"],
            stored["suppressed"], stored["enrolled"]) == (8, 3, 2, 2, 1, 3)

    again = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert (again.imported, again.updated, again.unchanged, again.duplicate, again.enrolled) == (0, 0, 3, 2, 0)
    assert again.problems == r.problems


def test_problems_returned_are_bounded_but_all_are_stored(db_url, tmp_path, monkeypatch):
    monkeypatch.setattr(leads, "PROBLEMS_SHOWN", 3)
    path = tmp_path / "bad.csv"
    path.write_text("Email\n" + "".join(f"bad{i}\n" for i in range(10)) + "good@acme.example\n",
                    encoding="utf-8")
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert [p.line for p in r.problems] == [2, 3, 4] and r.problems_omitted == 7
    assert (r.invalid, r.imported) == (10, 1)
    assert [p["line"] for p in latest_run(db_url)["problems"]] == list(range(2, 12))
    assert "problems_omitted" in json.loads(json.dumps(r.to_dict()))


def test_bad_utf8_deep_in_the_file_names_the_line_and_imports_nothing(db_url, tmp_path):
    path = tmp_path / "late.csv"
    good = "".join(f"p{i}@acme.example,Zoë,Ça Ltd\n" for i in range(60_000))  # several MiB blocks
    path.write_bytes(b"Email,First Name,Company\n" + good.encode("utf-8")
                     + b"j@acme.example,J\xf6rg,X\n")
    with pytest.raises(ImportFileError, match=r"late\.csv, line 60002: not UTF-8 \(byte 0xf6\)"):
        import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0
    assert rows(db_url, "SELECT id FROM outreach.import_runs") == []
