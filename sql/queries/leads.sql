-- Leads. An import stages the parsed file in a temporary table and applies it with set-based
-- statements inside one transaction: all of a file's good rows, or nothing (the enrolments it
-- makes: enrollments.sql; its record: import_runs.sql; its source rows: sources.sql).

-- name: lead_by_address
SELECT id, email FROM outreach.leads WHERE email = %(address)s;

-- name: lead_import_hold_off_erasure
-- At the start of a lead import, in its transaction: an erasure (erasure_wait_for_imports) waits
-- until this import commits, and one already running is waited for here, so the import's
-- suppression check sees every erasure committed before its upsert.
SELECT pg_advisory_xact_lock_shared(hashtextextended('outreach.erasure-vs-import', 0)) IS NULL
       AS waited;

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

-- name: lead_stage_memory
-- For the rest of this transaction, sorts and hashes of up to 128 MB stay in memory: the upsert
-- sorts every staged row by address, the duplicate search and the enrolment join hash them; at
-- the default 4 MB 100,000 rows spill (the sort 18 MB to disk) and a million rows many times
-- over. One import's backend at a time.
SET LOCAL work_mem = '128MB';

-- name: lead_stage_index_lines
-- The stage table's lines, indexed before the COPY: each batch's suppression (and the first
-- problems by line) are read by it.
CREATE INDEX ON outreach_lead_stage (line);

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
-- by one index probe each (enrollment_insert_staged). Only the columns the later statements
-- filter, join or sort on (the names, titles and extra columns took three quarters of it).
ANALYZE outreach_lead_stage (line, email, duplicate_of, suppressed, problem_action);

-- name: lead_stage_mark_suppressed
-- Suppression at import: the one rule decides, for the staged lines %(from_line)s to
-- %(to_line)s (NULL, NULL: all), asked once for all their addresses
-- (outreach.suppressed_addresses, the set form of outreach.is_suppressed: the erasure key checked
-- once, each address hashed once; 0139). A CSV import asks it for each batch of rows just copied,
-- while the next batch is read (outreach.leads._stage_rows), by the line index. Only suppressed
-- rows are written; lead_stage_mark_duplicates clears the mark of a row that repeats an earlier line.
UPDATE outreach_lead_stage st SET suppressed = true
FROM outreach.suppressed_addresses(ARRAY(
         SELECT email FROM outreach_lead_stage
         WHERE (%(from_line)s::integer IS NULL OR line BETWEEN %(from_line)s AND %(to_line)s)
           AND email IS NOT NULL)) sup(address)
WHERE (%(from_line)s::integer IS NULL OR st.line BETWEEN %(from_line)s AND %(to_line)s)
  AND st.email = sup.address;

-- name: lead_stage_mark_duplicates
-- In-file duplicates: the first line of each normalised address wins; later lines repeat it and
-- become the row's problem (an ignored field of a duplicate row is not reported: the row is
-- skipped), and not a suppressed row (it was asked before: lead_stage_mark_suppressed). Only
-- addresses that occur more than once are joined back, so the update touches only them.
UPDATE outreach_lead_stage s
SET duplicate_of = f.first_line, suppressed = false, problem_field = 'email',
    problem_reason = 'duplicate of line ' || f.first_line, problem_action = 'skipped'
FROM (SELECT email, min(line) AS first_line
      FROM outreach_lead_stage WHERE email IS NOT NULL
      GROUP BY email HAVING count(*) > 1) f
WHERE s.email = f.email AND s.line > f.first_line;

-- name: lead_stage_mark_campaign_finished
-- A finished campaign takes no new leads (outreach_enrollments_refuse_finished): each line whose
-- lead would be newly enrolled gets the problem that says so (the lead itself is still stored
-- or updated, like any other line). A lead already enrolled keeps its enrolment, unmarked. The
-- campaign's status is read after campaign_upsert locked its row in this transaction, so a
-- finish cannot commit in between. Returns how many lines were marked.
WITH marked AS (
    UPDATE outreach_lead_stage s
    SET problem_field = 'campaign',
        problem_reason = 'campaign ' || c.key || ' is finished: a finished campaign takes no new '
                         'leads (import them into a new campaign)',
        problem_action = 'not enrolled'
    FROM outreach.campaigns c
    WHERE c.id = %(campaign_id)s AND c.status = 'finished'
      AND s.email IS NOT NULL AND s.duplicate_of IS NULL AND NOT s.suppressed
      AND NOT EXISTS (SELECT 1 FROM outreach.enrollments en
                      JOIN outreach.leads l ON l.id = en.lead_id
                      WHERE en.campaign_id = c.id AND l.email = s.email)
    RETURNING 1
)
SELECT count(*)::integer AS marked FROM marked;

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

-- name: lead_timeline
-- Everything that happened to one lead (outreach lead show), oldest first: enrolments and their
-- stops, emails queued, sent, failed (with the failure's reason), inbound messages (class,
-- reason, effect), delivery failures, suppressions and unsuppressions of its address. Its
-- enrolment reads 'suppressed' while the address is suppressed (the stored status stays: an
-- unsuppress resumes the sequence).
WITH l AS (SELECT id, email FROM outreach.leads WHERE email = %(address)s)
SELECT * FROM (
    SELECT en.enrolled_at AS at, 'enrolled' AS what,
           format('campaign %%s, status %%s', c.key,
                  CASE WHEN en.status = 'active' AND outreach.is_suppressed(l.email)
                       THEN 'suppressed' ELSE en.status END) AS detail
    FROM l JOIN outreach.enrollments en ON en.lead_id = l.id
    JOIN outreach.campaigns c ON c.id = en.campaign_id
    UNION ALL
    SELECT en.stopped_at, 'stopped', format('campaign %%s: %%s (%%s, by %%s)', c.key, en.status,
                                            en.stop_reason, en.stopped_by)
    FROM l JOIN outreach.enrollments en ON en.lead_id = l.id
    JOIN outreach.campaigns c ON c.id = en.campaign_id
    WHERE en.stopped_at IS NOT NULL
    UNION ALL
    SELECT coalesce(s.accepted_at, e.updated_at),
           CASE WHEN s.id IS NOT NULL THEN 'sent' ELSE e.status::text END,
           concat_ws(', ', format('email %%s, step %%s', e.id, st.position),
                     CASE WHEN s.id IS NOT NULL THEN format('Message-ID <%%s>', s.message_id) END,
                     e.failure_kind, e.last_error,
                     CASE WHEN e.failure_reason IS NOT NULL
                          THEN format('reason %%s %%s', e.failure_reason,
                                      coalesce(e.failure_status, '')) END)
    FROM l JOIN outreach.emails e ON e.lead_id = l.id
    LEFT JOIN outreach.sequence_steps st ON st.id = e.step_id
    LEFT JOIN outreach.send_log s ON s.email_id = e.id
    UNION ALL
    SELECT coalesce(im.received_at, im.recorded_at), 'inbound ' || im.class,
           concat_ws(', ', CASE WHEN im.reason IS NOT NULL
                                THEN format('reason %%s %%s', im.reason, coalesce(im.dsn_status, ''))
                           END, 'effect: ' || im.effect)
    FROM l JOIN outreach.inbound_messages im
         ON im.lead_id = l.id OR im.address = l.email
    UNION ALL
    SELECT ev.created_at, ev.action,
           format('%%s (%%s, source %%s%%s)', ev.reason, ev.kind, ev.source,
                  CASE WHEN ev.actor IS NOT NULL THEN ', by ' || ev.actor ELSE '' END)
    FROM l JOIN outreach.suppression_events ev
         ON (ev.kind = 'address' AND ev.value = l.email)
         OR (ev.kind = 'domain' AND ev.value = split_part(l.email, '@', 2))
) t
ORDER BY at NULLS LAST, what;
