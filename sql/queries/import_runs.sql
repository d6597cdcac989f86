-- Import runs (outreach.import_runs): one row per imported file with its counts and its first
-- problems, built from the import's stage table (leads.sql).

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
