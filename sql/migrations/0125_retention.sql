-- 0125: retention (issue 27, item 4). What an inbound message said about a person (its sender,
-- subject, the address a report named, the diagnostic, the evidence text) and an import run's
-- problem lines are personal data kept only for a number of days (outreach.retention). The rows
-- themselves stay: inbound_messages' UNIQUE keys are what make a message read twice apply once,
-- and an import run's counts are its history. The purge blanks the content and stamps when, so a
-- second purge (or one killed half-way and run again) changes nothing it already changed.
ALTER TABLE outreach.inbound_messages ADD COLUMN content_purged_at timestamptz;
ALTER TABLE outreach.import_runs ADD COLUMN problems_purged_at timestamptz;
