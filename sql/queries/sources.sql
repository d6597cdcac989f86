-- Lead sources (outreach.source_rows, outreach.source_objects): which source row names which lead,
-- and which object of a source a run has taken. Run inside the import's transaction, after the
-- stage table is filled (leads.sql).

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
