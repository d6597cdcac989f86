-- 0005: an import run counts leads that were already known and unchanged separately from rows
-- repeated within the file (before, both were "duplicate", so a re-import showed every row as a
-- duplicate while listing only the in-file repeats).

ALTER TABLE outreach.import_runs ADD COLUMN unchanged integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN outreach.import_runs.duplicate IS 'rows repeating an earlier row of the same file';
COMMENT ON COLUMN outreach.import_runs.unchanged IS 'rows whose lead was already known, unchanged';
