"""A CSV import copies its rows STAGE_BATCH at a time and asks each batch's suppression while the
next batch is read (outreach.leads._stage_rows): whatever the batch size, the result is the one
of a single pass — a repeated suppressed address counts as a duplicate, not as suppressed,
whichever batch each line fell in; a row of a batch is never asked twice or skipped."""

from __future__ import annotations

import pytest

from outreach import db, leads
from outreach.leads import import_leads
from outreach.suppression import suppress
from support.paths import CAMPAIGN, MAILBOXES

CSV = ("Email,First Name,Company\n"
       "blocked@acme.example,Blocked,Acme\n"      # line 2: suppressed
       "ok1@acme.example,Ok,Acme\n"               # line 3
       "not-an-email,Bad,Acme\n"                  # line 4
       "BLOCKED@acme.example,Again,Acme\n"        # line 5: duplicate of line 2, not suppressed
       "x@blocked.example,Dom,Blocked\n"          # line 6: suppressed (domain)
       "ok1@acme.example,Dup,Acme\n"              # line 7: duplicate of line 3
       "ok2@acme.example,Ok2,Acme\n"              # line 8
       "y@blocked.example,Dom2,Blocked\n")        # line 9: suppressed (domain), the last row


def outcome(url: str, path) -> tuple:
    r = import_leads(url, CAMPAIGN, MAILBOXES, path)
    with db.connect(url, autocommit=True) as conn:
        stored = db.one(conn, "import_run_latest", {"kind": "leads"})
    return ((r.rows_total, r.imported, r.duplicate, r.invalid, r.suppressed, r.enrolled),
            r.suppressed_lines, [str(p) for p in r.problems], stored["problems"])


@pytest.mark.parametrize("batch", [1, 2, 3, 7, 10_000])
def test_every_batch_size_gives_the_one_pass_result(db_url, tmp_path, monkeypatch, batch):
    monkeypatch.setattr(leads, "STAGE_BATCH", batch)
    with db.transaction(db_url) as conn:
        suppress(conn, "blocked@acme.example", "unsubscribed", "test")
        suppress(conn, "@blocked.example", "do-not-contact", "test")
    path = tmp_path / "leads.csv"
    path.write_text(CSV, encoding="utf-8")
    counts, suppressed_lines, problems, stored = outcome(db_url, path)
    assert counts == (8, 2, 2, 1, 3, 2)
    assert suppressed_lines == [2, 6, 9]
    assert problems == ["line 4, field email: invalid address: An email address must have an "
                        "@-sign. (row skipped)",
                        "line 5, field email: duplicate of line 2 (row skipped)",
                        "line 7, field email: duplicate of line 3 (row skipped)"]
    assert [(p["line"], p["reason"]) for p in stored] == [
        (4, stored[0]["reason"]), (5, "duplicate of line 2"), (7, "duplicate of line 3"),
        (2, "suppressed"), (6, "suppressed"), (9, "suppressed")]
