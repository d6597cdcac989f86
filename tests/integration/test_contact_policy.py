"""The contact policy across campaigns (outreach.claim_emails_v3, migrations 0111 and 0132):
concurrent claimers in different campaigns and mailboxes never give one person two emails in 24
hours nor contact more than K people of one company, and rows over a cap stay queued, later,
with their reason."""

from __future__ import annotations

import datetime as dt
import json

from outreach import db
from outreach.claim import claim
from support.scenario import claim_until_drained

NOW = dt.datetime(2026, 3, 4, 10, 7, tzinfo=dt.UTC)
PEOPLE = 200
MAILBOXES = 8  # four per campaign, one sender each


def _seed(conn) -> list[int]:
    """Two active campaigns sharing PEOPLE leads, step 1 of each queued and due for every lead."""
    boxes = [conn.execute(
        "INSERT INTO outreach.mailboxes (address, smtp_conn_id) VALUES (%s, 'smtp') RETURNING id",
        (f"box{i}@sender.example",)).fetchone()["id"] for i in range(MAILBOXES)]
    conn.execute("UPDATE outreach.mailboxes SET daily_cap = 10000 WHERE id = ANY(%s)", (boxes,))
    leads = [conn.execute("INSERT INTO outreach.leads (email) VALUES (%s) RETURNING id",
                          (f"p{i}@company{i % 17}.example",)).fetchone()["id"]
             for i in range(PEOPLE)]
    for c in range(2):
        camp = conn.execute(
            "INSERT INTO outreach.campaigns (key, name, timezone, send_days, window_start,"
            " window_end, source_file, status) VALUES (%s, %s, 'UTC', '{1,2,3,4,5,6,7}',"
            " '00:00', '24:00', 'x.yaml', 'active') RETURNING id",
            (f"c{c}", f"C{c}")).fetchone()["id"]
        step = conn.execute(
            "INSERT INTO outreach.sequence_steps (campaign_id, position, template, subject,"
            " delay_days) VALUES (%s, 1, 't', 's', 0) RETURNING id", (camp,)).fetchone()["id"]
        mine = boxes[c * 4:(c + 1) * 4]
        for i, lead in enumerate(leads):
            box = mine[i % 4]
            conn.execute("INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id)"
                         " VALUES (%s, %s, %s)", (camp, lead, box))
            conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id,"
                         " scheduled_for) VALUES (%s, %s, %s, %s, %s)",
                         (lead, step, camp, box, NOW - dt.timedelta(hours=1)))
    return boxes


def _senders(db_url: str, boxes: list[int], per_day: int | None,
             company_per_day: int | None = None) -> None:
    claim_until_drained(db_url, boxes, now=NOW, batch=10, rounds=20, person_per_day=per_day,
                        person_per_week=3, company_per_day=company_per_day)


def test_concurrent_senders_in_two_campaigns_give_no_one_two_emails_a_day(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
    _senders(db_url, boxes, per_day=1)
    with db.connect(db_url, autocommit=True) as conn:
        most = conn.execute("SELECT max(n) AS m, count(*) AS people FROM (SELECT lead_id,"
                            " count(*) AS n FROM outreach.emails WHERE status = 'sending'"
                            " GROUP BY lead_id) x").fetchone()
        assert most["m"] == 1, most
        assert most["people"] == PEOPLE  # everyone got their one email today
        held = conn.execute("SELECT count(*) AS n, min(scheduled_for) AS lo, max(scheduled_for)"
                            " AS hi, array_agg(DISTINCT hold_reason) AS why FROM outreach.emails"
                            " WHERE status = 'queued'").fetchone()
        # The other campaign's row of each person is held, not failed: queued 24 hours later.
        assert held["n"] == PEOPLE
        assert held["lo"] == held["hi"] == NOW + dt.timedelta(days=1)
        assert held["why"] == ["frequency cap: 1 a day"]
        assert conn.execute("SELECT count(*) AS n FROM outreach.emails WHERE status = 'sending'"
                            " AND hold_reason IS NOT NULL").fetchone()["n"] == 0


def test_the_week_cap_holds_a_row_until_the_oldest_touch_leaves_the_week(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        lead = conn.execute("SELECT min(id) AS id FROM outreach.leads").fetchone()["id"]
        # Three touches of this person in the last week (sent on days -6, -4, -2).
        steps = [conn.execute(
            "INSERT INTO outreach.sequence_steps (campaign_id, position, template, subject,"
            " delay_days) SELECT id, %s, 't', 's', 0 FROM outreach.campaigns WHERE key = 'c0'"
            " RETURNING id", (p,)).fetchone()["id"] for p in (2, 3, 4)]
        for step, days in zip(steps, (6, 4, 2), strict=True):
            at = NOW - dt.timedelta(days=days)
            conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id,"
                         " scheduled_for, status, claim_token, claimed_at, sent_at) SELECT %s, %s,"
                         " campaign_id, %s, %s, 'sent', gen_random_uuid(), %s, %s FROM"
                         " outreach.sequence_steps WHERE id = %s",
                         (lead, step, boxes[0], at, at, at, step))
        for box in boxes[:4]:
            claim(conn, box, 100, worker="w", now=NOW, person_per_day=1, person_per_week=3)
        row = conn.execute("SELECT status, scheduled_for, hold_reason FROM outreach.emails"
                           " WHERE lead_id = %s AND step_id NOT IN (SELECT unnest(%s::bigint[]))"
                           " AND campaign_id = (SELECT id FROM outreach.campaigns WHERE"
                           " key = 'c0')", (lead, steps)).fetchone()
        assert row["status"] == "queued"
        assert row["hold_reason"] == "frequency cap: 3 a week"
        assert row["scheduled_for"] == NOW + dt.timedelta(days=1)  # day -6 + 7 days


def test_the_day_is_24_hours_so_midnight_gives_no_second_email(db_url):
    late = dt.datetime(2026, 3, 4, 23, 59, 50, tzinfo=dt.UTC)
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        conn.execute("UPDATE outreach.emails SET scheduled_for = %s", (late - dt.timedelta(hours=1),))
        for box in boxes[:4]:
            claim(conn, box, 100, worker="w", now=late, person_per_day=1, person_per_week=3)
        after = late + dt.timedelta(seconds=20)  # the next UTC day
        for box in boxes[4:]:
            rows, note = claim(conn, box, 100, worker="w", now=after, person_per_day=1,
                               person_per_week=3)
            assert rows == []
            # The batch's summary line says why it claimed nothing (each mailbox has 50 people).
            assert (note, note.held) == ("50 held for later: frequency cap: 1 a day (50)", 50)
            again, note = claim(conn, box, 100, worker="w", now=after, person_per_day=1,
                                person_per_week=3)
            assert again == [] and (note, note.held) == ("", 0)  # the earlier claim's, not this one's
        held = conn.execute("SELECT count(*) AS n, min(scheduled_for) AS lo FROM outreach.emails"
                            " WHERE status = 'queued'").fetchone()
        assert held["n"] == PEOPLE
        assert held["lo"] == late + dt.timedelta(days=1)


def test_concurrent_senders_contact_at_most_k_people_of_a_company_a_day(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)  # 200 people at 17 companies, some through a subdomain
        conn.execute("UPDATE outreach.leads SET email = replace(email, '@company3.',"
                     " '@mail.company3.') WHERE id % 2 = 0")
        # Free mail is no company: ten people at gmail.com are not capped together.
        conn.execute("UPDATE outreach.leads SET email = 'free' || id || '@gmail.com'"
                     " WHERE email LIKE '%@company5.example'")
    from outreach import orgdomains
    orgdomains.fill(db_url)
    _senders(db_url, boxes, per_day=1, company_per_day=3)
    with db.connect(db_url, autocommit=True) as conn:
        per_org = {r["org"]: r["n"] for r in conn.execute(
            "SELECT outreach.org_of(l.email) AS org, count(DISTINCT e.lead_id) AS n"
            " FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
            " WHERE e.status = 'sending' GROUP BY 1")}
        free = per_org.pop(None)
        assert free == conn.execute("SELECT count(*) AS n FROM outreach.leads WHERE email LIKE"
                                    " '%@gmail.com'").fetchone()["n"] > 3
        assert set(per_org.values()) == {3}, per_org  # every company reached, none beyond 3
        assert len(per_org) == 16 and "company3.example" in per_org
        reasons = {r["hold_reason"] for r in conn.execute(
            "SELECT DISTINCT hold_reason FROM outreach.emails WHERE status = 'queued'")}
        assert "company cap: 3 people a day at company3.example" in reasons
        assert conn.execute("SELECT max(n) AS m FROM (SELECT lead_id, count(*) AS n FROM"
                            " outreach.emails WHERE status = 'sending' GROUP BY lead_id) x"
                            ).fetchone()["m"] == 1
    # The report says who waits and why (`outreach report --json`, the campaign page).
    from outreach import report
    waiting = json.loads(report.render_json(report.collect(db_url)))["waiting"]
    assert {"campaign": "c1", "step": 1, "reason": "frequency cap: 1 a day"} in [
        {k: w[k] for k in ("campaign", "step", "reason")} for w in waiting]
    company3 = [w for w in waiting if w["reason"].endswith("at company3.example")]
    assert company3 and sum(w["emails"] for w in company3) > 0
    assert "Waiting: queued emails the contact policy holds back" in report.render_text(
        report.collect(db_url))
    # The campaign page shows the same rows, per campaign ("waiting: frequency cap").
    from outreach.web.campaign_page import render_page
    page = render_page(report.collect(db_url))
    assert "Waiting: held back by the contact policy" in page
    assert ">company cap: 3 people a day at company3.example<" in page


def test_held_rows_do_not_spend_the_claims_limit(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        # Campaign c1's mailbox 4 has its rows due first, but every one of its first 10 people
        # was already touched today by campaign c0.
        first = [r["lead_id"] for r in conn.execute(
            "SELECT lead_id FROM outreach.emails WHERE mailbox_id = %s ORDER BY id LIMIT 10",
            (boxes[4],))]
        conn.execute("UPDATE outreach.emails SET status = 'sent', claim_token = gen_random_uuid(),"
                     " claimed_at = %s, sent_at = %s WHERE lead_id = ANY(%s) AND mailbox_id <> %s",
                     (NOW - dt.timedelta(hours=2), NOW - dt.timedelta(hours=2), first, boxes[4]))
        rows, _ = claim(conn, boxes[4], 10, worker="w", now=NOW, person_per_day=1,
                        person_per_week=3)
        assert len(rows) == 10
        assert not {r["lead_id"] for r in rows} & set(first)


def test_a_person_already_contacted_today_does_not_count_twice_for_the_company(db_url):
    """With two touches a day allowed, a person of a company reached its cap of one may get a
    second email (they are already its one person of the day); a new person of it waits."""
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        caps = {"person_per_day": 2, "person_per_week": 3, "company_per_day": 1}
        first, _ = claim(conn, boxes[0], 1, worker="w", now=NOW, **caps)
        assert [r["email"] for r in first] == ["p0@company0.example"]
        # Campaign c1's mailbox 4 has p0's second step due first, then p68 and p136 of company0.
        got, _ = claim(conn, boxes[4], 100, worker="w", now=NOW + dt.timedelta(minutes=1), **caps)
        emails = {r["email"] for r in got}
        assert "p0@company0.example" in emails
        assert not emails & {"p68@company0.example", "p136@company0.example"}
        held = {r["email"]: r["hold_reason"] for r in conn.execute(
            "SELECT l.email, e.hold_reason FROM outreach.emails e JOIN outreach.leads l"
            " ON l.id = e.lead_id WHERE e.mailbox_id = %s AND e.status = 'queued'"
            " AND l.email LIKE '%%@company0.example'", (boxes[4],))}
        assert held == {"p68@company0.example": "company cap: 1 people a day at company0.example",
                        "p136@company0.example": "company cap: 1 people a day at company0.example"}


def test_the_held_note_names_the_biggest_reasons_and_counts_the_rest():
    from outreach.claim import held_note

    assert (held_note({}), held_note({}).held) == ("", 0)
    assert held_note({"held": {}, "busy": 0}) == ""
    held = {"frequency cap: 1 a day": 7, "company cap: 3 people a day at a.example": 4,
            "holiday in DE": 2, "provider cap: microsoft 20 an hour": 1,
            "company cap: 3 people a day at b.example": 1}
    note = held_note({"held": held, "busy": 3})
    assert note == ("15 held for later: frequency cap: 1 a day (7); company cap: 3 people a day at"
                    " a.example (4); holiday in DE (2); other reasons (2); 3 busy: another sender"
                    " holds the person or their company (still due)")
    assert note.held == 15


def test_the_note_counts_this_claims_holds_in_a_savepoint_and_when_the_limit_is_met(db_url):
    """The counts come from the claim function itself (migration 0146): inside a caller's
    transaction (the claim's own is then a savepoint) and when the claim filled its limit after
    holding rows, the note still says what this claim held."""
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        for box in boxes[:4]:  # campaign c0 reaches everyone today
            claim(conn, box, 100, worker="w", now=NOW, person_per_day=1, person_per_week=3)
        # Ten people of mailbox 4 (campaign c1), its 31st to 40th rows in pick order, are fresh:
        # their c0 rows go back to the queue, for next month.
        fresh = [r["lead_id"] for r in conn.execute(
            "SELECT lead_id FROM outreach.emails WHERE mailbox_id = %s ORDER BY id"
            " LIMIT 10 OFFSET 30", (boxes[4],))]
        conn.execute("UPDATE outreach.emails SET status = 'queued', claim_token = NULL,"
                     " claimed_at = NULL, scheduled_for = %s WHERE lead_id = ANY(%s)"
                     " AND mailbox_id <> %s", (NOW + dt.timedelta(days=30), fresh, boxes[4]))
    with db.connect(db_url) as conn:  # not autocommit: claim's transaction is a savepoint
        conn.execute("SELECT 1")
        rows, note = claim(conn, boxes[4], 10, worker="w", now=NOW, person_per_day=1,
                           person_per_week=3)
        # Three rounds of ten held, the fourth claimed ten: the limit met, after holds.
        assert sorted(r["lead_id"] for r in rows) == sorted(fresh)
        assert (note, note.held) == ("30 held for later: frequency cap: 1 a day (30)", 30)


def test_rows_another_claimer_locks_are_called_busy(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        leads = [r["lead_id"] for r in conn.execute(
            "SELECT DISTINCT lead_id FROM outreach.emails WHERE mailbox_id = %s", (boxes[0],))]
    with db.connect(db_url) as other:  # another claimer holds three of those people
        for lead in leads[:3]:
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                          (f"outreach.person:{lead}",))
        with db.connect(db_url, autocommit=True) as conn:
            rows, note = claim(conn, boxes[0], 100, worker="w", now=NOW, person_per_day=1,
                               person_per_week=3)
        assert len(rows) == len(leads) - 3
        assert note == "3 busy: another sender holds the person or their company (still due)"
        assert note.held == 0
