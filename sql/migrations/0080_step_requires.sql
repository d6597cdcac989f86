-- 0080: a sequence step may require lead fields (issue 12, item 11). A template that uses
-- {{ lead.first_name }} sent "Hi ," to a lead without a first name. A step now says what it
-- requires (campaign file: `requires: [first_name, company]`); queue-due does not queue the step
-- for a lead that lacks one of them (blank), and the report counts those leads with the reason.
-- (Numbered 0080, not 0008: 0008 holds the address normaliser of the same issue, already merged.)

ALTER TABLE outreach.sequence_steps ADD COLUMN requires text[] NOT NULL DEFAULT '{}';
-- The lead fields a step can require: the text fields of outreach.leads a template renders
-- (outreach.campaign.LEAD_FIELDS; the email is always there).
ALTER TABLE outreach.sequence_steps ADD CONSTRAINT outreach_sequence_steps_requires_check
    CHECK (requires <@ ARRAY['first_name', 'last_name', 'company', 'title']::text[]);
COMMENT ON COLUMN outreach.sequence_steps.requires IS
    'lead fields this step needs (non-blank); a lead lacking one is not queued for the step';

-- The fields of `fields` that lead `l` has blank, sorted (an empty array: it has them all).
-- One place for the rule, used by queue-due and the report.
CREATE FUNCTION outreach.lead_missing_fields(l outreach.leads, fields text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(f ORDER BY f), '{}')
    FROM unnest(fields) AS f
    WHERE coalesce(btrim(CASE f WHEN 'first_name' THEN l.first_name
                                WHEN 'last_name' THEN l.last_name
                                WHEN 'company' THEN l.company
                                WHEN 'title' THEN l.title END), '') = ''
$$;
