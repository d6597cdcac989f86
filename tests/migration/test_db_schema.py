"""The schema and the rules that live in it (real PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import psycopg
import pytest

from outreach.dev import embedded
from outreach.migrate import current_version, discover, upgrade
from support.flow import import_demo, rows, scalar


def test_upgrade_twice_is_a_no_op(pg_admin_url):
    url = embedded.ensure_database(pg_admin_url, "outreach_upgrade_twice")
    try:
        first = upgrade(url)
        assert [m.version for m in first] == [m.version for m in discover()]
        assert upgrade(url) == []
        assert current_version(url) == discover()[-1].version
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute('DROP DATABASE "outreach_upgrade_twice" WITH (FORCE)')


def test_one_email_row_per_lead_and_step(db_url):
    import_demo(db_url)
    scalar(db_url, "SELECT 1")
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for)"
                     " SELECT e.lead_id, s.id, s.campaign_id, e.mailbox_id, now()"
                     " FROM outreach.enrollments e JOIN outreach.sequence_steps s ON s.campaign_id = e.campaign_id"
                     " WHERE s.position = 1 LIMIT 1")
        conn.commit()
        with pytest.raises(psycopg.errors.UniqueViolation, match="outreach_emails_lead_step_key"):
            conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for)"
                         " SELECT lead_id, step_id, campaign_id, mailbox_id, now() FROM outreach.emails LIMIT 1")


def test_idempotency_key_never_changes(db_url):
    from outreach.queue import queue_due

    import_demo(db_url)
    queue_due(db_url)
    with psycopg.connect(db_url) as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match="never changes"):
            conn.execute("UPDATE outreach.emails SET idempotency_key = gen_random_uuid()"
                         " WHERE id = (SELECT min(id) FROM outreach.emails)")


def slot(url, after, tz, days=(1, 2, 3, 4, 5), start="09:00", end="17:00"):
    return scalar(url, "SELECT outreach.next_send_slot(%s, %s, %s, %s, %s)",
                  (after, tz, list(days), start, end))


@pytest.mark.parametrize("tz, local_after, expected_local", [
    # Europe/Berlin spring forward: Sunday 2027-03-28 02:00 → 03:00. Window opens at 02:30.
    ("Europe/Berlin", "2027-03-28 00:30", "2027-03-28 03:30"),
    ("Europe/Berlin", "2027-03-27 23:00", "2027-03-28 03:30"),
    # Fall back: Sunday 2026-10-25 03:00 → 02:00; 02:30 happens twice. PostgreSQL reads an
    # ambiguous local time as standard time, the second 02:30 (fold=1): still inside the window.
    ("Europe/Berlin", "2026-10-25 00:30", "2026-10-25 02:30+fold"),
    # America/New_York spring forward 2027-03-14 02:00 → 03:00; fall back 2026-11-01.
    ("America/New_York", "2027-03-14 00:00", "2027-03-14 03:30"),
    ("America/New_York", "2026-11-01 00:00", "2026-11-01 02:30"),  # 02:30 is unambiguous in NY
])
def test_send_window_across_dst(db_url, tz, local_after, expected_local):
    z = ZoneInfo(tz)
    after = dt.datetime.fromisoformat(local_after).replace(tzinfo=z)
    got = slot(db_url, after, tz, days=range(1, 8), start="02:30", end="05:00")
    # On spring-forward days 02:30 does not exist; PostgreSQL opens the window at 03:30.
    fold = 1 if expected_local.endswith("+fold") else 0
    expected = dt.datetime.fromisoformat(expected_local.removesuffix("+fold")).replace(tzinfo=z, fold=fold)
    assert got.astimezone(dt.UTC) == expected.astimezone(dt.UTC), got


def test_send_window_business_hours(db_url):
    berlin = ZoneInfo("Europe/Berlin")
    fri_evening = dt.datetime(2026, 11, 27, 18, 0, tzinfo=berlin)
    assert slot(db_url, fri_evening, "Europe/Berlin") == dt.datetime(2026, 11, 30, 9, 0, tzinfo=berlin)
    inside = dt.datetime(2026, 11, 30, 10, 15, tzinfo=berlin)
    assert slot(db_url, inside, "Europe/Berlin") == inside
    ny = ZoneInfo("America/New_York")
    # 16:30 in Berlin on a Monday is 10:30 in New York: open there.
    t = dt.datetime(2026, 11, 30, 16, 30, tzinfo=berlin)
    assert slot(db_url, t, "America/New_York") == t
    assert slot(db_url, t, "America/New_York").astimezone(ny).hour == 10


def test_warmup_limit_day_boundaries(db_url):
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO outreach.mailboxes (address, smtp_conn_id, timezone, daily_cap, warmup_start)"
                     " VALUES ('new@mail.example', 'x', 'Europe/Berlin', 40, '2026-12-01')")
        conn.commit()

    def limit(local: str) -> int:
        at = dt.datetime.fromisoformat(local).replace(tzinfo=ZoneInfo("Europe/Berlin"))
        return scalar(db_url, "SELECT outreach.mailbox_daily_limit(m, %s) FROM outreach.mailboxes m"
                      " WHERE address = 'new@mail.example'", (at,))

    assert limit("2026-11-30 23:59") == 0    # before the start date: nothing
    assert limit("2026-12-01 00:00") == 10   # first week: at most 10 a day
    assert limit("2026-12-07 23:59") == 10   # day 7 is still the first week
    assert limit("2026-12-08 00:00") == 15   # then + 5 a day
    assert limit("2026-12-13 12:00") == 40   # capped by daily_cap
    assert rows(db_url, "SELECT status FROM outreach.mailboxes")[0]["status"] == "active"
