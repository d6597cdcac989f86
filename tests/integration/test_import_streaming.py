"""Streamed import (real PostgreSQL): in-file duplicates found in SQL (first line wins), counts
computed in SQL, every problem stored in import_runs, a bounded list returned, one transaction."""

from __future__ import annotations

import json

import pytest

from outreach import db, leads
from outreach.leadfile import ImportFileError
from outreach.leads import import_leads
from outreach.suppression import suppress
from support.flow import rows, scalar
from support.paths import CAMPAIGN, MAILBOXES

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


# --- found by the adversarial review of the streamed import --------------------------------------

def test_an_unclosed_quote_is_reported_with_the_lines_it_swallowed(db_url, tmp_path):
    path = tmp_path / "quote.csv"
    path.write_text('Email,First Name\nkept@acme.example,Kept\nstray@acme.example,"Stray\n'
                    + "".join(f"r{i}@acme.example,R{i}\n" for i in range(5)), encoding="utf-8")
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert r.imported == 1
    [p] = r.problems
    assert (p.line, p.field) == (3, "(row)") and "lines 3–8" in p.reason and "quote" in p.reason


def test_odd_time_zones_and_headers_never_stop_an_import(db_url, tmp_path):
    path = tmp_path / "tz.csv"
    path.write_text("Email,Time Zone\na@acme.example,America\nb@acme.example," + "x" * 300
                    + "\nc@acme.example,Europe/Berlin\n", encoding="utf-8")
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert r.imported == 3
    assert [(p.line, p.field, p.action) for p in r.problems] == [(2, "timezone", "ignored"),
                                                                 (3, "timezone", "ignored")]
    nul_header = tmp_path / "nul.csv"
    nul_header.write_bytes(b"Email,Na\x00me\na@acme.example,x\n")
    with pytest.raises(ImportFileError, match=r"nul\.csv, line 1: the header row contains a NUL"):
        import_leads(db_url, CAMPAIGN, MAILBOXES, nul_header)


def test_a_bad_byte_in_a_cr_only_file_names_its_line(db_url, tmp_path):
    path = tmp_path / "cr.csv"
    # Not UTF-8, so read as Windows-1252 (detected), where 0x81 is unassigned.
    path.write_bytes(b"Email\ra@acme.example\rb@acme.example\rc\x81@acme.example\r")
    with pytest.raises(ImportFileError, match=r"cr\.csv, line 4: not Windows-1252 \(byte 0x81\)"):
        import_leads(db_url, CAMPAIGN, MAILBOXES, path)


def test_stored_problems_are_capped_and_counted(db_url, tmp_path, monkeypatch):
    """A jsonb value is capped at 256 MiB: 3,000 problems naming a 100,000-character header
    used to fail the whole import. Now names are cut, at most PROBLEMS_STORED problems are
    stored and the rest counted; the good row is imported."""
    monkeypatch.setattr(leads, "PROBLEMS_STORED", 1000)
    monkeypatch.setattr(leads, "PROBLEMS_SHOWN", 10)
    with db.transaction(db_url) as conn:
        suppress(conn, "@blocked.example", "do-not-contact", "test")
    path = tmp_path / "big.csv"
    with path.open("w", encoding="utf-8") as f:
        f.write("Email," + "N" * 100_000 + "\ngood@acme.example,ok\n")
        f.writelines(f"p{i}@acme.example,a\x00\n" for i in range(3000))
        f.writelines(f"s{i}@blocked.example,s\n" for i in range(50))
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert (r.imported, r.invalid, r.suppressed) == (1, 3000, 50)
    assert len(r.problems) == 10 and r.problems_omitted == 2990 and len(r.suppressed_lines) == 10
    assert len(r.problems[0].field) <= 60
    run = latest_run(db_url)
    assert len(run["problems"]) == 1000 and run["problems_omitted"] == 2050


def test_overlapping_imports_at_once_do_not_deadlock(db_url, tmp_path):
    """Two imports of the same 5,000 addresses in opposite orders, into two campaigns with
    their own mailboxes, at the same moment: leads are upserted in address order, so both lock
    them in the same order."""
    import threading

    import yaml

    boxes = yaml.safe_load(MAILBOXES.read_text())
    campaign = yaml.safe_load(CAMPAIGN.read_text())
    files = []
    for n, order in ((1, 1), (2, -1)):
        mb = tmp_path / f"mailboxes{n}.yaml"
        mb.write_text(yaml.safe_dump({"mailboxes": [boxes["mailboxes"][n - 1]]}))
        cp = tmp_path / f"campaign{n}.yaml"
        cp.write_text(yaml.safe_dump({**campaign, "key": f"overlap-{n}",
                                      "mailboxes": [boxes["mailboxes"][n - 1]["address"]]}))
        csv = tmp_path / f"leads{n}.csv"
        csv.write_text("Email,First Name\n" + "".join(
            f"u{i}@overlap.example,U{n}\n" for i in range(5000)[::order]), encoding="utf-8")
        files.append((cp, mb, csv))
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(cp, mb, csv):
        try:
            barrier.wait(10)
            import_leads(db_url, cp, mb, csv)
        except BaseException as exc:  # noqa: BLE001 - collected: the test asserts there were none
            errors.append(exc)

    threads = [threading.Thread(target=run, args=f) for f in files]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert errors == []
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 5000
    assert scalar(db_url, "SELECT count(*) FROM outreach.enrollments") == 10000


MIXED = ("Email,First Name,Last Name,Company,Time Zone\n"
         "a1@acme.example,Ann,Lee,Acme,Europe/Berlin\n"
         "not-an-email,Bad,,Acme,\n"
         ",,,,\n"                                           # blank: no row
         "a2@acme.example,Nul\x00,,Acme,\n"
         "a3@acme.example,Too,Many,Acme,UTC,extra\n"
         "A1@ACME.example,Dup,,Acme,\n"
         f"a4@acme.example,{'x' * 201},,Acme,\n"
         "a5@acme.example,Zone,,Acme,Mars/Olympus\n"
         "\"a6@acme.example\",\"Multi\nLine\",,Acme,\n"     # a line break in a header field
         + "".join(f"b{i}@beta.example,B{i},,Beta,\n" for i in range(40))
         + "\"broken@acme.example,Open quote,,Acme,\n"      # never closed: malformed CSV at the end
         )


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_rows_checked_in_worker_processes_are_the_rows_checked_here(tmp_path, chunk):
    """The parallel check (worker processes, chunks in flight) yields the same rows, problems,
    order and counts as the check in this process, whatever the chunk size."""
    path = tmp_path / "mixed.csv"
    path.write_text(MIXED, encoding="utf-8")
    with leads.open_leads_csv(path) as here:
        expected = list(here.staged(0))
        counts = (here.rows_total, here.invalid)
    with leads.open_leads_csv(path) as there:
        got = list(there.staged(2, chunk=chunk))
        assert (there.rows_total, there.invalid) == counts
    assert got == expected
    assert len(expected) == counts[0] == 49 and counts[1] == 5
    assert {r[8] for r in expected if r[1] is None} == {"email", "First Name", "(row)", "first_name"}


def test_an_import_checked_in_worker_processes_stores_what_one_checked_here_stores(db_url, tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text(MIXED, encoding="utf-8")
    parallel = import_leads(db_url, CAMPAIGN, MAILBOXES, path, workers=2)
    again = import_leads(db_url, CAMPAIGN, MAILBOXES, path, workers=0)
    assert (parallel.rows_total, parallel.imported, parallel.duplicate, parallel.invalid) == (
        49, 43, 1, 5)
    assert [str(p) for p in parallel.problems] == [str(p) for p in again.problems]
    assert (again.imported, again.unchanged, again.rows_total) == (0, 43, 49)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 43


# ---------------------------------------------------------------------------------------------
# F2: one NUL byte in one row makes the whole leads import fail (nothing imported)
# ---------------------------------------------------------------------------------------------

def test_nul_in_one_row_does_not_stop_the_rest(db_url, tmp_path):
    p = tmp_path / "nul.csv"
    p.write_bytes(b"Email,First Name,Company\ngood1@ex.example,Ann,A\n"
                  b"nul@ex.example,B\x00ob,B\ngood2@ex.example,Cy,C\n")
    try:
        r = import_leads(db_url, CAMPAIGN, MAILBOXES, p)
    except Exception as exc:  # noqa: BLE001 - any failure fails the test with this message
        pytest.fail(f"import of a file with one NUL byte failed as a whole: {type(exc).__name__}: {exc}")
    assert r.imported >= 2


def test_an_import_says_where_its_time_went(db_url, tmp_path, caplog):
    """Issue 16: a slow import's log names the seconds of each stage, in the order they ran."""
    import logging

    path = tmp_path / "leads.csv"
    path.write_text("Email\n" + "".join(f"t{i}@timing.example\n" for i in range(300)),
                    encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="outreach"):
        r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert list(r.seconds) == ["read", "copy", "suppression", "duplicates", "upsert", "enrol",
                               "record"]
    assert all(s >= 0 for s in r.seconds.values()) and r.enrolled == 300
    line = next(m for m in caplog.messages if m.startswith(f"import {path}: seconds "))
    assert line == f"import {path}: seconds {r.timings()}" and "enrol " in line
    assert json.loads(json.dumps(r.to_dict()))["seconds"] == r.seconds
