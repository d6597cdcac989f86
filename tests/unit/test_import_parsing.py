"""CSV parsing: CRM headers, BOM, normalisation, bad rows named by line, field and reason.

In-file duplicates are found in SQL when the rows are imported: see test_import_streaming.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from outreach.leadcheck import LeadRow, Problem, map_headers
from outreach.leadcsv import open_leads_csv
from outreach.leadfile import ImportFileError
from outreach.leads import normalise_address
from support.paths import LEADS


def write(tmp_path: Path, text: str, *, bom: bool = False, name: str = "leads.csv") -> Path:
    p = tmp_path / name
    p.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return p


def read(path: Path, **kw) -> tuple[list[LeadRow], list[Problem], object]:
    """Read a whole file: ``(rows, problems, reader)`` (problems include ignored fields)."""
    rows, problems = [], []
    with open_leads_csv(path, **kw) as leads:
        for item in leads:
            if isinstance(item, LeadRow):
                rows.append(item)
                if item.ignored:
                    problems.append(item.ignored)
            else:
                problems.append(item)
    return rows, problems, leads


@pytest.mark.parametrize("headers, expected", [
    (["Email", "First Name", "Last Name", "Company", "Title"],
     {"email": 0, "first_name": 1, "last_name": 2, "company": 3, "title": 4}),
    (["Email Address", "First name", "Surname", "Company Name", "Job Title"],
     {"email": 0, "first_name": 1, "last_name": 2, "company": 3, "title": 4}),
    (["E-mail", "Given Name", "Organization", "Position"],
     {"email": 0, "first_name": 1, "company": 2, "title": 3}),
    (["Record ID", "Work Email", "Account Name", "Time Zone"],
     {"email": 1, "company": 2, "timezone": 3}),
])
def test_headers_of_common_exports_are_recognised(headers, expected):
    assert map_headers(headers) == expected


def test_same_address_in_other_letter_case_is_one_lead():
    assert normalise_address(" Maria.Garcia@Acme.COM ") == normalise_address("maria.garcia@acme.com")


def test_bom_and_no_bom_parse_the_same(tmp_path):
    text = "Email,First Name\r\nana@acme.example,Ana\r\n"
    a, _, _ = read(write(tmp_path, text, bom=True, name="a.csv"))
    b, _, _ = read(write(tmp_path, text, name="b.csv"))
    assert [r.email for r in a] == [r.email for r in b] == ["ana@acme.example"]
    assert a[0].first_name == "Ana"


def test_bad_rows_are_reported_by_line_and_good_rows_kept(tmp_path):
    text = ("Email,First Name,Company\n"
            "ok1@acme.example,Ok,Acme\n"          # line 2
            "not-an-email,Bad,Acme\n"             # line 3
            ",Empty,Acme\n"                       # line 4
            "OK1@ACME.example,Dup,Acme\n"         # line 5 (a duplicate: found at import)
            "\n"                                  # line 6 (blank: ignored)
            "ok2@acme.example,\"Multi\nLine\",Acme\n"  # lines 7-8
            "x@acme.example,A,B,C,D\n"            # line 9: too many fields
            "ok3@acme.example,Ok3,Acme\n")        # line 10
    rows, found, leads = read(write(tmp_path, text))
    assert [r.email for r in rows] == ["ok1@acme.example", "ok1@acme.example", "ok2@acme.example",
                                       "ok3@acme.example"]
    assert [r.line for r in rows] == [2, 5, 7, 10]
    assert rows[2].first_name == "Multi Line"  # CR/LF in a name is folded to a space
    problems = {(p.line, p.field): p.reason for p in found}
    assert "invalid address" in problems[(3, "email")]
    assert problems[(4, "email")] == "empty"
    assert "fields but the header has" in problems[(9, "(row)")]
    assert len(found) == 3
    assert leads.rows_total == 7 and leads.invalid == 3


def test_unknown_time_zone_is_ignored_not_fatal(tmp_path):
    rows, problems, _ = read(write(tmp_path, "Email,Time Zone\nz@acme.example,Mars/Olympus\n"))
    assert rows[0].timezone is None
    assert problems[0].action == "ignored" and problems[0].line == 2


def test_file_without_email_column_names_file_and_headers(tmp_path):
    p = write(tmp_path, "Name,Company\nAna,Acme\n")
    with pytest.raises(ImportFileError, match=r"leads\.csv, line 1: no email column.*'Name'"):
        open_leads_csv(p)


def test_non_utf8_file_names_the_line(tmp_path):  # declared UTF-8: auto would read Windows-1252
    p = tmp_path / "latin1.csv"
    p.write_bytes("Email,First Name\nok@acme.example,Ana\nj@acme.example,J\xf6rg\n".encode("latin-1"))
    with pytest.raises(ImportFileError, match=r"latin1\.csv, line 3: not UTF-8"):
        read(p, encoding="utf-8")


def test_shipped_sample_has_what_the_demo_promises():
    rows, problems, leads = read(LEADS)
    assert leads.rows_total >= 200
    assert len(rows) - len({r.email for r in rows}) >= 2  # duplicates (reported at import)
    reasons = [p.reason for p in problems]
    assert sum(r.startswith("invalid") or r == "empty" for r in reasons) >= 3
    raw = LEADS.read_text(encoding="utf-8-sig")
    assert "Rosa.Moreau@Coho-Winery.example" in raw  # the duplicate differing only in case


def test_non_utf8_line_is_found_across_read_blocks(tmp_path):
    # A valid two-byte character split by the 1 MiB read boundary is not the error; the bad
    # byte on the next line is.
    p = tmp_path / "split.csv"
    p.write_bytes(b"Email,First Name\n" + b"a" * (2**20 - 18) + "ë".encode() + b"\nx@acme.example,\xff\n")
    with pytest.raises(ImportFileError, match=r"split\.csv, line 3: not UTF-8 \(byte 0xff\)"):
        read(p)


def test_non_utf8_header_names_line_1(tmp_path):
    p = tmp_path / "head.csv"
    p.write_bytes(b"E\xe9mail\nx@acme.example\n")
    with pytest.raises(ImportFileError, match=r"head\.csv, line 1: not UTF-8"):
        open_leads_csv(p, encoding="utf-8")


def test_nul_byte_and_blank_rows(tmp_path):
    text = "Email,First Name\nnul@acme.example,B\x00ob\n , \n\nok@acme.example,Ok\n"
    rows, problems, leads = read(write(tmp_path, text))
    assert [(p.line, p.field) for p in problems] == [(2, "First Name")]
    assert "NUL byte" in problems[0].reason
    assert [r.line for r in rows] == [5] and leads.rows_total == 2 and leads.invalid == 1
