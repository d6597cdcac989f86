-- The warehouse export (outreach.export; migration 0131 says why the position is (xact, id) and
-- why a batch is planned before it is written). Every move of a cursor is one guarded UPDATE:
-- a run whose view of the cursor is stale changes nothing and learns it from the row count.

-- name: export_cursor_ensure
-- The target's cursor, created at the start of the log the first time the target is named.
INSERT INTO outreach.export_cursors (target) VALUES (%(target)s)
ON CONFLICT (target) DO NOTHING;

-- name: export_cursor_try_lock
-- One collect at a time per event-Asset announcer (outreach.eventassets.collect): a session
-- advisory lock held by a connection of its own for the whole collect (released when it closes
-- or the process dies). A second collect would replay the first one's planned batch and count
-- it twice. The warehouse export takes none: a replayed batch is written again idempotently.
SELECT pg_try_advisory_lock(hashtextextended('outreach.export_cursor:' || %(target)s, 0)) AS locked;

-- name: export_cursor_get
-- Where the target is: the last event it has and the batch being written, if any. FOR UPDATE
-- is not taken: the guarded UPDATEs below settle a race, and a reader must not block a writer.
SELECT target, done_xact::text AS done_xact, done_id, planned_xact::text AS planned_xact,
       planned_id, exported
FROM outreach.export_cursors WHERE target = %(target)s;

-- name: export_events_next
-- The next batch after the position: only rows whose transaction is below this statement's
-- xmin (every such transaction has ended, so no row can still appear before the last one
-- returned), in (xact, id) order, at most %(batch)s.
-- ORDER BY names the table's columns (ev.): a bare "xact" would be the text output column, and
-- '1000' sorts before '999'.
SELECT ev.id, ev.kind, ev.occurred_at, ev.xact::text AS xact, ev.campaign_id, ev.lead_id,
       ev.email_id, ev.payload
FROM outreach.events ev
WHERE (ev.xact, ev.id) > (%(after_xact)s::xid8, %(after_id)s)
  AND ev.xact < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY ev.xact, ev.id
LIMIT %(batch)s;

-- name: export_events_planned
-- A planned batch again, exactly: the rows after done up to planned. All are below an xmin taken
-- when the batch was planned, so the set is the one the killed run was writing.
SELECT ev.id, ev.kind, ev.occurred_at, ev.xact::text AS xact, ev.campaign_id, ev.lead_id,
       ev.email_id, ev.payload
FROM outreach.events ev
WHERE (ev.xact, ev.id) > (%(after_xact)s::xid8, %(after_id)s)
  AND (ev.xact, ev.id) <= (%(upto_xact)s::xid8, %(upto_id)s)
ORDER BY ev.xact, ev.id;

-- name: export_cursor_plan
-- Record the batch about to be written (its last row). Guarded: only from the position this run
-- read and with no other batch planned, so two runs never plan two batches from one position.
UPDATE outreach.export_cursors
SET planned_xact = %(upto_xact)s::xid8, planned_id = %(upto_id)s, updated_at = now()
WHERE target = %(target)s AND planned_xact IS NULL
  AND done_xact = %(after_xact)s::xid8 AND done_id = %(after_id)s
RETURNING target;

-- name: export_cursor_advance
-- The target has the planned batch: it becomes the position. Guarded on both ends, so of two
-- runs that wrote the same batch only one counts it.
UPDATE outreach.export_cursors
SET done_xact = planned_xact, done_id = planned_id, planned_xact = NULL, planned_id = NULL,
    exported = exported + %(count)s, updated_at = now()
WHERE target = %(target)s
  AND done_xact = %(after_xact)s::xid8 AND done_id = %(after_id)s
  AND planned_xact = %(upto_xact)s::xid8 AND planned_id = %(upto_id)s
RETURNING target;

-- name: export_cursor_ensure_at_end
-- A consumer that must not act on the whole past (reply notifications, outreach.notify): its
-- cursor, created the first time at the last final event (as in export_events_next) that is
-- more than a day old, so a first run acts on at most the last day's events (the replies the
-- inbox recorded before the notifications' first run, not a year of them). Nothing when it
-- exists.
INSERT INTO outreach.export_cursors (target, done_xact, done_id)
SELECT %(target)s, coalesce(last.xact, '0'::xid8), coalesce(last.id, 0)
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT ev.xact, ev.id FROM outreach.events ev
    WHERE ev.xact < pg_snapshot_xmin(pg_current_snapshot())
      AND ev.occurred_at < now() - interval '1 day'
    ORDER BY ev.xact DESC, ev.id DESC LIMIT 1) AS last ON true
ON CONFLICT (target) DO NOTHING;
