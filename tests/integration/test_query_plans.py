"""Statements that must hold whatever plan PostgreSQL picks: the claim never takes more rows than
its limit (a locking subquery rescanned per row once took a mailbox's whole queue), and
queue_due is planned with hash joins, never a nested loop over the table it fills. Each runs
with statistics that mislead the planner (none yet, or a table analyzed empty)."""

from __future__ import annotations

import psycopg
import pytest

from outreach.queue import queue_due
from support.flow import scalar
from support.paths import MAILBOXES


@pytest.mark.parametrize("message_class", ["marketing", "transactional"])
def test_a_claim_never_takes_more_than_its_limit_whatever_the_plan(db_url, message_class):
    """CI failure of 2026-11-30 (one send run sent 196 rows where its plan allowed 100): written
    as ``e.id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)``, the claim's locking subquery could
    run as a subplan rescanned per row; each rescan skipped the rows the statement had already
    updated and returned the next n, so one claim took a mailbox's whole queue (daily cap and
    batch size ignored). It happened while the tables had no statistics (right after an import,
    before autovacuum's ANALYZE). The locking SELECT now runs once, as its own statement in
    outreach.claim_emails_v1 (migration 0018; before it, a MATERIALIZED CTE)."""
    from outreach import db
    from outreach.campaign import sync_mailboxes
    from outreach.claim import claim
    from outreach.transactional import enqueue

    with psycopg.connect(db_url, autocommit=True) as c:
        for table in ("emails", "leads", "campaigns", "mailboxes", "enrollments"):
            c.execute(f"ALTER TABLE outreach.{table} SET (autovacuum_enabled = false)")
    if message_class == "marketing":
        from support.flow import import_demo

        import_demo(db_url)
        queue_due(db_url)
        mailbox = 1
    else:
        sync_mailboxes(db_url, MAILBOXES)
        with db.connect(db_url) as conn, conn.transaction():
            for i in range(60):
                enqueue(conn, f"k{i}", f"user{i}@example.com", "welcome",
                        {"user": {"name": "U"}, "verify_url": "https://app.example/v"})
        mailbox = scalar(db_url, "SELECT id FROM outreach.mailboxes WHERE transactional")
    with db.connect(db_url, autocommit=True) as conn:
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE")
            taken, _ = claim(conn, mailbox, 5, worker="t", message_class=message_class)
            assert len(taken) == 5, (analyzed, len(taken))


def test_queue_due_is_planned_without_a_nested_loop_over_the_table_it_fills(db_url):
    """Benchmark finding (issue 8): with statistics that say outreach.emails is empty (a fresh
    database, a first run after a big import), email_queue_due was planned as a nested-loop anti
    join scanning outreach.emails once per candidate while the statement filled it: quadratic
    (100,000 leads: 116 s). queue_due plans it with hash joins (email_planner_bulk_joins)."""
    from outreach import db
    from support.flow import import_demo

    import_demo(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("VACUUM ANALYZE")  # outreach.emails is analyzed empty
    with db.connect(db_url) as conn, conn.transaction():
        db.run(conn, "email_planner_bulk_joins")
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN " + db.query("email_queue_due"),
            {"now": None, "campaign_key": None, "part": 0, "parts": 1}).fetchall())
    assert "Anti Join" in plan and "Nested Loop Anti Join" not in plan, plan
    assert queue_due(db_url) == {"queued": 196, "per_mailbox": {1: 98, 2: 98}, "held": [],
                                 "finished": []}
    assert queue_due(db_url) == {"queued": 0, "per_mailbox": {}, "held": [], "finished": []}



def test_the_claim_reads_the_queue_in_order_and_stops_at_its_limit(db_url, tmp_path):
    """Benchmark finding (issue 16): with the window test written ``next_send_slot(…) = now``,
    the planner expected a handful of a mailbox's queued rows to pass, so the claim's pick joined
    every queued row of the mailbox by hash and sorted them before keeping its limit (13 ms a
    claim at 2,500 queued rows, growing with the queue, under the mailbox lock). Written ``<=``
    (migration 0085) it walks the queue index in order and stops at the limit. The pick is read
    from the installed outreach.claim_emails_v1 and explained with its variables as values."""
    import re

    from outreach.leads import import_leads
    from support.flow import leads_csv
    from support.paths import CAMPAIGN

    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, [f"q{i}@plan{i % 7}.example" for i in range(3000)]))
    queue_due(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        body = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'claim_emails_v1'"
                            ).fetchone()[0]
        pick = re.search(r"IF p_message_class = 'marketing' THEN\s+v_picked := ARRAY\((.*?SKIP LOCKED)\);",
                         body, re.S).group(1)
        pick = (pick.replace("v_now", "now()").replace("p_mailbox_id", "1")
                .replace("p_limit", "5"))
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + pick))
    assert "Index Scan using outreach_emails_queued_idx" in plan, plan
    assert "Hash Join" not in plan and "Sort" not in plan, plan


def test_the_claims_update_never_reads_the_queue_index_whatever_the_statistics(db_url, tmp_path):
    """Benchmark finding (issue 16, migration 0086): right after queue-due, with statistics that
    say outreach.emails is empty, the claim's UPDATE (``id = ANY (v_picked)`` guarded by
    ``status = 'queued'``) was planned as a scan of outreach_emails_queued_idx, the whole queue,
    for every claim. The UPDATE is read from the installed function and explained with its
    variables as values; its plan may take the primary key or, on these 3,000 rows, a sequential
    scan (sql/schema.sql), never the queue index."""
    import re
    import uuid

    from outreach import db
    from outreach.leads import import_leads
    from support.flow import leads_csv
    from support.paths import CAMPAIGN

    with psycopg.connect(db_url, autocommit=True) as c:
        for table in ("emails", "leads", "campaigns", "mailboxes", "enrollments"):
            c.execute(f"ALTER TABLE outreach.{table} SET (autovacuum_enabled = false)")
        c.execute("VACUUM ANALYZE")  # every table analyzed empty, as on a new database
    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, [f"k{i}@plan{i % 7}.example" for i in range(3000)]))
    queue_due(db_url)
    with db.connect(db_url) as conn, conn.transaction():
        body = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'claim_emails_v1'"
                            ).fetchone()["prosrc"]
        update = re.search(r"RETURN QUERY\s+(UPDATE outreach\.emails e.*?RETURNING e\.\*);",
                           body, re.S).group(1)
        ids = [r["id"] for r in conn.execute(
            "SELECT id FROM outreach.emails ORDER BY id DESC LIMIT 50")]
        update = (update.replace("v_picked", f"ARRAY{ids}::bigint[]")
                  .replace("p_claim_token", f"'{uuid.uuid4()}'::uuid")
                  .replace("p_claimed_by", "'t'").replace("v_now", "now()"))
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + update))
        assert "queued_idx" not in plan, plan
