"""The per-person frequency cap across campaigns (outreach.claim_emails_v2, migration 0111):
concurrent claimers in different campaigns and mailboxes never give one person two emails in a
day, and rows over the cap stay queued, later, with their reason."""

from __future__ import annotations

import datetime as dt
import threading

from outreach import db
from outreach.send import claim

NOW = dt.datetime(2026, 3, 4, 10, 7, tzinfo=dt.UTC)
MIDNIGHT = dt.datetime(2026, 3, 5, tzinfo=dt.UTC)
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


def _senders(db_url: str, boxes: list[int], per_day: int | None) -> None:
    start = threading.Barrier(len(boxes))
    errors: list[Exception] = []

    def run(box: int) -> None:
        try:
            with db.connect(db_url, autocommit=True) as conn:
                start.wait()
                for _ in range(20):
                    rows, _note = claim(conn, box, 10, worker=f"w{box}", now=NOW,
                                        person_per_day=per_day, person_per_week=3)
                    due = conn.execute(
                        "SELECT count(*) AS n FROM outreach.emails WHERE mailbox_id = %s AND"
                        " status = 'queued' AND scheduled_for <= %s", (box, NOW)).fetchone()["n"]
                    if not rows and not due:
                        return
        except Exception as exc:  # noqa: BLE001 - re-raised by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,)) for b in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


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
        # The other campaign's row of each person is held, not failed: queued for tomorrow.
        assert held["n"] == PEOPLE
        assert held["lo"] == held["hi"] == MIDNIGHT
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
