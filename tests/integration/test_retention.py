"""Retention blanks exactly the personal content past its limit, once (real PostgreSQL).

Inbound messages recorded 89, 90 + a minute and 200 days before a fixed clock, and import runs
created 29, 30 + a minute and 60 days before it: with the defaults (90 and 30 days) only the
older ones are blanked; the rows, their UNIQUE keys and counts stay; a second run changes
nothing; a re-read of a purged message still applies nothing (the key is kept).
"""

from __future__ import annotations

import datetime as dt
import json

import psycopg

from outreach.retention import purge
from outreach.settings import RetentionSettings

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
AGES_INBOUND = {"young": dt.timedelta(days=89), "just_past": dt.timedelta(days=90, minutes=1),
                "old": dt.timedelta(days=200)}
AGES_IMPORT = {"young": dt.timedelta(days=29), "just_past": dt.timedelta(days=30, minutes=1),
               "old": dt.timedelta(days=60)}


def _seed(conn: psycopg.Connection) -> None:
    for uid, (name, age) in enumerate(AGES_INBOUND.items(), start=1):
        conn.execute(
            "INSERT INTO outreach.inbound_messages (account, folder, uidvalidity, uid, message_id,"
            " from_address, subject, class, evidence, address, diagnostic, recorded_at)"
            " VALUES ('imap_x', 'INBOX', 1, %s, %s, %s, %s, 'hard_bounce', %s, %s, %s, %s)",
            (uid, f"m-{name}@x", f"ann.{name}@lead.example", f"Re: hello Ann {name}",
             f"Final-Recipient ann.{name}@lead.example", f"ann.{name}@lead.example",
             "550 5.1.1 user unknown", NOW - age))
    for name, age in AGES_IMPORT.items():
        conn.execute(
            "INSERT INTO outreach.import_runs (kind, file, rows_total, imported, updated, duplicate,"
            " invalid, suppressed, enrolled, problems, created_at)"
            " VALUES ('leads', %s, 3, 1, 0, 0, 2, 0, 1, %s, %s)",
            (f"{name}.csv", json.dumps([{"line": 2, "field": "email", "reason": f"not an address: ann.{name}"},
                                        {"line": 3, "field": "first_name", "reason": "too long"}]),
             NOW - age))


def _inbound(conn):
    return {r[0].split("@")[0][2:]: r[1:] for r in conn.execute(
        "SELECT message_id, from_address, subject, address, diagnostic, evidence,"
        " content_purged_at FROM outreach.inbound_messages ORDER BY id")}


def _imports(conn):
    return {r[0][:-4]: r[1:] for r in conn.execute(
        "SELECT file, jsonb_array_length(problems), problems_omitted, problems_purged_at,"
        " invalid FROM outreach.import_runs ORDER BY id")}


def test_retention_blanks_exactly_what_is_past_the_limit(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        _seed(conn)
    result = purge(db_url, now=NOW, settings=RetentionSettings(), batch=1)  # batches of one row
    assert (result.inbound_purged, result.import_runs_purged) == (2, 2)
    with psycopg.connect(db_url) as conn:
        inbound, imports = _inbound(conn), _imports(conn)
    assert inbound["young"] == ("ann.young@lead.example", "Re: hello Ann young",
                                "ann.young@lead.example", "550 5.1.1 user unknown",
                                "Final-Recipient ann.young@lead.example", None)
    for name in ("just_past", "old"):
        assert inbound[name] == ("", "", None, None, "", NOW), name
    assert imports["young"] == (2, 0, None, 2)
    for name in ("just_past", "old"):
        assert imports[name] == (0, 2, NOW, 2), name  # the counts stay

    again = purge(db_url, now=NOW + dt.timedelta(hours=1), settings=RetentionSettings())
    assert (again.inbound_purged, again.import_runs_purged) == (0, 0)
    with psycopg.connect(db_url) as conn:
        assert _inbound(conn) == inbound and _imports(conn) == imports


def test_a_purged_message_read_again_still_applies_once(db_url):
    # The key stays: inserting the same UID again is still a conflict (no second effect).
    with psycopg.connect(db_url, autocommit=True) as conn:
        _seed(conn)
    purge(db_url, now=NOW, settings=RetentionSettings())
    with psycopg.connect(db_url, autocommit=True) as conn:
        again = conn.execute(
            "INSERT INTO outreach.inbound_messages (account, folder, uidvalidity, uid, message_id,"
            " class, evidence) VALUES ('imap_x', 'INBOX', 1, 3, 'm-old@x', 'hard_bounce', '')"
            " ON CONFLICT DO NOTHING RETURNING id").fetchall()
    assert again == []
