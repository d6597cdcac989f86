-- Leads and enrolments. An import stages the parsed file in a temporary table and applies it
-- with set-based statements inside one transaction: all of a file's good rows, or nothing.

-- name: lead_stage_create
-- One row per data row of the file, written by one COPY as the file is read: a good row has an
-- email (and, if a field was dropped, problem_* with action 'ignored'); a skipped row has no email
-- and problem_* say why. duplicate_of and suppressed are decided afterwards, set-based.
CREATE TEMPORARY TABLE outreach_lead_stage (
    line           integer NOT NULL,
    email          text,
    first_name     text,
    last_name      text,
    company        text,
    title          text,
    timezone       text,
    custom         jsonb,
    problem_field  text,
    problem_reason text,
    problem_action text,
    duplicate_of   integer,
    suppressed     boolean NOT NULL DEFAULT false,
    row_key        text              -- a source's row identity (outreach.sources), else NULL
) ON COMMIT DROP;

-- name: lead_stage_copy
COPY outreach_lead_stage (line, email, first_name, last_name, company, title, timezone, custom,
                          problem_field, problem_reason, problem_action)
FROM STDIN;

-- name: lead_stage_copy_keyed
-- A source's rows (outreach.sources): the same columns and the row's identity.
COPY outreach_lead_stage (line, email, first_name, last_name, company, title, timezone, custom,
                          problem_field, problem_reason, problem_action, row_key)
FROM STDIN;

-- name: lead_stage_analyze
-- Statistics for the filled stage table (autovacuum never analyses a temporary table): without
-- them the planner takes a million staged rows for a few dozen and joins them to outreach.leads
-- by one index probe each (enrollment_insert_staged).
ANALYZE outreach_lead_stage;

-- name: lead_stage_mark_duplicates
-- In-file duplicates: the first line of each normalised address wins; later lines repeat it and
-- become the row's problem (an ignored field of a duplicate row is not reported: the row is
-- skipped). Only addresses that occur more than once are joined back, so the update touches only
-- them.
UPDATE outreach_lead_stage s
SET duplicate_of = f.first_line, problem_field = 'email',
    problem_reason = 'duplicate of line ' || f.first_line, problem_action = 'skipped'
FROM (SELECT email, min(line) AS first_line
      FROM outreach_lead_stage WHERE email IS NOT NULL
      GROUP BY email HAVING count(*) > 1) f
WHERE s.email = f.email AND s.line > f.first_line;

-- name: lead_stage_mark_suppressed
-- Suppression at import: the one function decides. Only suppressed rows are written.
UPDATE outreach_lead_stage SET suppressed = true
WHERE email IS NOT NULL AND duplicate_of IS NULL AND outreach.is_suppressed(email);

-- name: lead_stage_counts
-- accepted: rows that go on to the upsert (good, first of their address, not suppressed);
-- problems: rows reported in ImportResult.problems (skipped, ignored field, or duplicate).
SELECT count(*) FILTER (WHERE duplicate_of IS NOT NULL) AS duplicate,
       count(*) FILTER (WHERE suppressed) AS suppressed,
       count(*) FILTER (WHERE email IS NOT NULL AND duplicate_of IS NULL AND NOT suppressed)
           AS accepted,
       count(*) FILTER (WHERE problem_action IS NOT NULL) AS problems
FROM outreach_lead_stage;

-- name: lead_upsert_staged
-- New leads are inserted; known leads are updated only when a field really changed, so importing
-- the same file twice changes nothing. Suppressed addresses are not stored at all. Returns counts,
-- not rows: a million-row file must not come back to Python.
WITH upserted AS (
    INSERT INTO outreach.leads AS l (email, first_name, last_name, company, title, timezone,
                                     custom)
    SELECT email, first_name, last_name, company, title, timezone, custom
    FROM outreach_lead_stage
    WHERE email IS NOT NULL AND duplicate_of IS NULL AND NOT suppressed
    -- In address order, not file order: two imports of overlapping files then lock the same
    -- leads in the same order and cannot deadlock.
    ORDER BY email
    ON CONFLICT ON CONSTRAINT outreach_leads_email_key DO UPDATE
    -- Extra columns are merged: a file's columns replace the same keys, keys of other files
    -- (another campaign's columns) stay.
    SET first_name = excluded.first_name, last_name = excluded.last_name,
        company = excluded.company, title = excluded.title, timezone = excluded.timezone,
        custom = l.custom || excluded.custom, updated_at = now()
    WHERE (l.first_name, l.last_name, l.company, l.title, l.timezone, l.custom)
          IS DISTINCT FROM (excluded.first_name, excluded.last_name, excluded.company,
                            excluded.title, excluded.timezone, l.custom || excluded.custom)
    RETURNING (l.xmax = 0) AS inserted
)
SELECT count(*) FILTER (WHERE inserted) AS imported,
       count(*) FILTER (WHERE NOT inserted) AS updated
FROM upserted;

-- name: lead_stage_problems
-- The first %(limit)s problems by line, as ImportResult.problems shows them (duplicates
-- included: lead_stage_mark_duplicates made them the row's problem).
SELECT line, problem_field AS field, problem_reason AS reason, problem_action AS action
FROM outreach_lead_stage
WHERE problem_action IS NOT NULL
ORDER BY line
LIMIT %(limit)s;

-- name: lead_stage_suppressed_lines
-- The first %(limit)s suppressed lines (all are counted and stored with the run).
SELECT line FROM outreach_lead_stage WHERE suppressed ORDER BY line LIMIT %(limit)s;

-- name: enrollment_insert_staged
-- Enrol every staged, unsuppressed lead; a lead already enrolled keeps its enrolment (and its
-- mailbox, so follow-ups come from the same sender). Mailboxes are assigned round-robin by lead id.
-- Returns the count of new enrolments.
WITH mbs AS (
    SELECT array_agg(mailbox_id ORDER BY mailbox_id) AS ids
    FROM outreach.campaign_mailboxes WHERE campaign_id = %(campaign_id)s
), enrolled AS (
    INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id, enrolled_at)
    SELECT %(campaign_id)s, l.id, mbs.ids[1 + (l.id %% cardinality(mbs.ids))],
           coalesce(%(now)s::timestamptz, now())
    FROM outreach_lead_stage s
    JOIN outreach.leads l ON l.email = s.email
    CROSS JOIN mbs
    WHERE s.email IS NOT NULL AND s.duplicate_of IS NULL AND NOT s.suppressed
    ON CONFLICT ON CONSTRAINT outreach_enrollments_campaign_lead_key DO NOTHING
    RETURNING 1
)
SELECT count(*) AS enrolled FROM enrolled;

-- name: import_run_insert_staged
-- The run's row, with the problems built from the stage table: the file's problems by line
-- (as lead_stage_problems), then the suppressed lines; at most %(stored)s of them (a jsonb value
-- is capped at 256 MiB), field and reason cut to 200 characters, the rest counted.
WITH p AS (
    SELECT line, false AS suppressed, problem_field AS field, problem_reason AS reason,
           problem_action AS action
    FROM outreach_lead_stage
    WHERE problem_action IS NOT NULL
    UNION ALL
    SELECT line, true, 'email', 'suppressed', 'skipped'
    FROM outreach_lead_stage WHERE suppressed
),
kept AS (SELECT * FROM p ORDER BY suppressed, line LIMIT %(stored)s)
INSERT INTO outreach.import_runs (kind, file, campaign_key, rows_total, imported, updated,
                                  duplicate, unchanged, invalid, suppressed, enrolled, problems,
                                  problems_omitted)
SELECT %(kind)s, %(file)s, %(campaign_key)s, %(rows_total)s, %(imported)s, %(updated)s,
       %(duplicate)s, %(unchanged)s, %(invalid)s, %(suppressed)s, %(enrolled)s,
       coalesce((SELECT jsonb_agg(jsonb_build_object('line', k.line, 'field', left(k.field, 200),
                                                     'reason', left(k.reason, 200),
                                                     'action', k.action)
                                  ORDER BY k.suppressed, k.line) FROM kept k), '[]'::jsonb),
       (SELECT count(*) FROM p) - (SELECT count(*) FROM kept)
RETURNING id;

-- name: import_run_get
-- One import run for `outreach import show`, its counts without the (large) problem list.
SELECT id, kind, file, campaign_key, rows_total, imported, updated, unchanged, duplicate,
       invalid, suppressed, enrolled, problems_omitted,
       jsonb_array_length(problems) AS problems_stored, created_at
FROM outreach.import_runs WHERE id = %(id)s;

-- name: import_run_problems_page
-- One page of a run's stored problems, in stored order (by line, suppressed lines last).
SELECT (e.p ->> 'line')::integer AS line, e.p ->> 'field' AS field, e.p ->> 'reason' AS reason,
       e.p ->> 'action' AS action
FROM outreach.import_runs r
CROSS JOIN LATERAL jsonb_array_elements(r.problems) WITH ORDINALITY AS e(p, n)
WHERE r.id = %(id)s
ORDER BY e.n
LIMIT %(limit)s OFFSET %(offset)s;

-- name: import_run_latest
SELECT * FROM outreach.import_runs WHERE kind = %(kind)s ORDER BY id DESC LIMIT 1;

-- name: source_rows_record
-- A source's run saw these rows: each valid row's identity now names its lead (then
-- source_rows_seen).
INSERT INTO outreach.source_rows AS r (campaign_id, row_key, lead_id, last_run_id)
SELECT DISTINCT ON (s.row_key) %(campaign_id)s, s.row_key, l.id, %(run_id)s
FROM outreach_lead_stage s JOIN outreach.leads l ON l.email = s.email
WHERE s.row_key IS NOT NULL AND s.email IS NOT NULL AND s.duplicate_of IS NULL
      AND NOT s.suppressed
ORDER BY s.row_key, s.line
ON CONFLICT ON CONSTRAINT outreach_source_rows_key DO UPDATE
SET lead_id = excluded.lead_id, last_run_id = excluded.last_run_id;

-- name: source_rows_seen
-- Every row the run returned (valid or not: a row that turned invalid has not left the source)
-- is marked seen by this run, so only rows that left the source are older
-- (source_rows_stop_missing).
UPDATE outreach.source_rows r SET last_run_id = %(run_id)s
WHERE r.campaign_id = %(campaign_id)s AND r.last_run_id <> %(run_id)s
  AND r.row_key IN (SELECT row_key FROM outreach_lead_stage WHERE row_key IS NOT NULL);

-- name: source_rows_stop_missing
-- stop_when_missing: the active enrolments of leads whose row this run did not return are
-- stopped by the one stop function (queued steps cancelled in the same transaction).
SELECT count(outreach.stop_enrollment(en.id, 'stopped', %(reason)s, %(by)s)) AS stopped
FROM outreach.source_rows r
JOIN outreach.enrollments en ON en.campaign_id = r.campaign_id AND en.lead_id = r.lead_id
WHERE r.campaign_id = %(campaign_id)s AND r.last_run_id < %(run_id)s AND en.status = 'active';

-- name: source_object_claim
-- A file source's object is imported once: the claim is taken in the import's transaction; a
-- concurrent run's insert waits for that commit and then claims nothing (a rollback frees it).
INSERT INTO outreach.source_objects (campaign_key, source, path, version)
VALUES (%(campaign_key)s, %(source)s, %(path)s, %(version)s)
ON CONFLICT ON CONSTRAINT outreach_source_objects_key DO NOTHING
RETURNING id;

-- name: source_object_done
UPDATE outreach.source_objects SET import_run_id = %(run_id)s WHERE id = %(id)s;
