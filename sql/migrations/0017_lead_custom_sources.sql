-- 0017 (issue 14): every column of a lead file reaches the templates, and leads arrive from
-- sources declared in the campaign file.
--
-- leads.custom: the columns beyond the known fields, as a JSON object of text values
-- ({{ lead.custom.city }}); an import merges its columns into it (outreach.leads; the size caps
-- per value and per row are checked there, the CHECK here is the backstop for rows written
-- another way).
ALTER TABLE outreach.leads ADD COLUMN custom jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE outreach.leads ADD CONSTRAINT outreach_leads_custom_check
    CHECK (jsonb_typeof(custom) = 'object' AND length(custom::text) <= 65536);

-- A file source imports each object once: the object's (source, path, version) is claimed with
-- INSERT … ON CONFLICT DO NOTHING in the import's own transaction, so a retry or a second,
-- concurrent run of the import finds it claimed (or waits for the first to commit) and imports
-- nothing twice. version: the object's ETag, else its modification time and size.
CREATE TABLE outreach.source_objects (
    id            bigserial PRIMARY KEY,
    campaign_key  text NOT NULL,
    source        text NOT NULL,                -- the campaign's source path pattern
    path          text NOT NULL,                -- the object's full path (URI)
    version       text NOT NULL,
    import_run_id bigint REFERENCES outreach.import_runs (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_source_objects_key UNIQUE (source, path, version)
);

-- A SQL source's rows by their stable identity (the address, or the declared id_column): the
-- lead a row became, and the import run that last saw it (stop_when_missing stops the
-- enrolments of leads a later run no longer saw).
CREATE TABLE outreach.source_rows (
    campaign_id  bigint NOT NULL REFERENCES outreach.campaigns (id),
    row_key      text NOT NULL,
    lead_id      bigint NOT NULL REFERENCES outreach.leads (id),
    last_run_id  bigint NOT NULL REFERENCES outreach.import_runs (id),
    CONSTRAINT outreach_source_rows_key PRIMARY KEY (campaign_id, row_key)
);
CREATE INDEX outreach_source_rows_run ON outreach.source_rows (campaign_id, last_run_id);
