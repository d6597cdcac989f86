-- 0126: A/B variants per step (issue 24, item 6). A step may have variants, each with its own
-- subject and/or template (NULL: the step's) and a weight. Which variant a lead gets for a step
-- is chosen once, when its row is queued (email_queue_due, by outreach.step_variant_for: a hash
-- of the campaign key, the lead id and the step position mapped onto the cumulative weights), and
-- stored on the row; a trigger refuses every later change, so retries, clears and requeues keep
-- it. A variant dropped from the campaign file is retired (active = false), never deleted: rows
-- queued with it still render with its content, and the report still counts it.
CREATE TABLE outreach.step_variants (
    step_id  bigint NOT NULL REFERENCES outreach.sequence_steps (id),
    name     text NOT NULL,
    position integer NOT NULL,                -- order in the campaign file (1 = first)
    subject  text,                            -- a Jinja2 string; NULL: the step's subject
    template text,                            -- include/templates/<template>.*; NULL: the step's
    weight   integer NOT NULL,                -- share of new rows: weight / sum of active weights
    active   boolean NOT NULL DEFAULT true,   -- false: in no campaign file any more, never chosen
    CONSTRAINT outreach_step_variants_pkey PRIMARY KEY (step_id, name),
    CONSTRAINT outreach_step_variants_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_\-]{0,39}$'),
    CONSTRAINT outreach_step_variants_weight_check CHECK (weight > 0)
);

ALTER TABLE outreach.emails ADD COLUMN variant text;
ALTER TABLE outreach.emails ADD CONSTRAINT outreach_emails_variant_fkey
    FOREIGN KEY (step_id, variant) REFERENCES outreach.step_variants (step_id, name);
COMMENT ON COLUMN outreach.emails.variant IS
    'the step variant this row renders (outreach.step_variants); fixed when queued; NULL: none';

-- The variant of (lead, step) for a row queued now: the first 32 bits of md5(campaign key / lead
-- id / step position), modulo the sum of the step's active weights, falls into one variant's
-- share of the cumulative weights (in file order). Deterministic: the same lead and step give
-- the same variant in every run and part of queue-due, and in a preview. NULL when the step has
-- no active variant.
CREATE FUNCTION outreach.step_variant_for(p_step_id bigint, p_lead_id bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT v.name
    FROM (SELECT sv.name, sum(sv.weight) OVER (ORDER BY sv.position, sv.name) AS upto,
                 sum(sv.weight) OVER () AS total
          FROM outreach.step_variants sv
          WHERE sv.step_id = p_step_id AND sv.active) v
    CROSS JOIN (SELECT c.key, st.position FROM outreach.sequence_steps st
                JOIN outreach.campaigns c ON c.id = st.campaign_id
                WHERE st.id = p_step_id) s
    WHERE mod(('x' || left(md5(s.key || '/' || p_lead_id || '/' || s.position), 8))::bit(32)::bigint,
              v.total) < v.upto
    ORDER BY v.upto
    LIMIT 1
$$;

CREATE FUNCTION outreach.emails_keep_variant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outreach.emails.variant never changes once queued (email %)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_emails_keep_variant';
END
$$;

CREATE TRIGGER outreach_emails_keep_variant
    BEFORE UPDATE ON outreach.emails
    FOR EACH ROW WHEN (OLD.variant IS DISTINCT FROM NEW.variant)
    EXECUTE FUNCTION outreach.emails_keep_variant();
