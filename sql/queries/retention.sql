-- Retention (outreach.retention): personal content older than its limit is blanked in batches,
-- each batch its own transaction. The guard `... purged_at IS NULL` makes a second run (or a
-- run killed half-way and started again) touch only what is still to do; the rows and their
-- UNIQUE keys stay (migration 0125 says why).

-- name: retention_purge_inbound
-- One batch of inbound messages recorded before now - %(days)s days: sender, subject, the
-- address a report named, diagnostic and evidence blanked. SKIP LOCKED: two purges at once
-- take different rows instead of waiting on each other.
WITH due AS (
    SELECT id FROM outreach.inbound_messages
    WHERE content_purged_at IS NULL
      AND recorded_at < coalesce(%(now)s, now()) - make_interval(days => %(days)s)
    ORDER BY id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outreach.inbound_messages im
SET from_address = '', subject = '', address = NULL, diagnostic = NULL, evidence = '',
    content_purged_at = coalesce(%(now)s, now())
FROM due
WHERE im.id = due.id
RETURNING im.id;

-- name: retention_purge_import_problems
-- One batch of import runs created before now - %(days)s days: their problem lines (which quote
-- the rows' fields) emptied, the counts kept; problems_omitted then counts the purged ones too.
WITH due AS (
    SELECT id FROM outreach.import_runs
    WHERE problems_purged_at IS NULL
      AND created_at < coalesce(%(now)s, now()) - make_interval(days => %(days)s)
    ORDER BY id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE outreach.import_runs r
SET problems_omitted = r.problems_omitted + jsonb_array_length(r.problems),
    problems = '[]'::jsonb,
    problems_purged_at = coalesce(%(now)s, now())
FROM due
WHERE r.id = due.id
RETURNING r.id;
