-- 0007: an import run stores at most 100,000 problems (PostgreSQL caps a jsonb value at 256 MiB:
-- a file of millions of bad rows, or a few thousand with a huge header name, failed the whole
-- import when every problem went into one value). The rest are counted here.

ALTER TABLE outreach.import_runs ADD COLUMN problems_omitted integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN outreach.import_runs.problems_omitted IS
    'problems not stored in problems (only the first 100,000 by line are)';
