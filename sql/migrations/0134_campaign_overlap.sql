-- 0134: what a campaign does with a person who is already in another campaign's sequence (issue
-- 25, item 1): overlap 'allow' (default: both run, the frequency cap spaces the touches), 'wait'
-- (step 1 is not queued until the other sequence is done: email_queue_due) or 'skip' (the
-- enrolment is made stopped, with the reason: enrollment_insert_staged).
ALTER TABLE outreach.campaigns ADD COLUMN overlap text NOT NULL DEFAULT 'allow';
ALTER TABLE outreach.campaigns ADD CONSTRAINT outreach_campaigns_overlap_check
    CHECK (overlap IN ('allow', 'wait', 'skip'));
COMMENT ON COLUMN outreach.campaigns.overlap IS
    'a person already in another sequence: allow, wait (step 1 after the other is done) or skip';

-- The key of another campaign whose sequence the lead is in now, or NULL. In a sequence: an
-- active enrolment in an active or paused campaign (other than p_campaign_id) whose last step
-- has no email in a final state (sent, failed, cancelled, suppressed) yet. With p_before_at /
-- p_before_id only enrolments made before (enrolled_at, id) count: two 'wait' campaigns that
-- enrolled one person at once then wait for the earlier enrolment only, never for each other.
CREATE FUNCTION outreach.lead_in_other_sequence(p_lead_id bigint, p_campaign_id bigint,
                                                p_before_at timestamptz DEFAULT NULL,
                                                p_before_id bigint DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT c.key
    FROM outreach.enrollments en
    JOIN outreach.campaigns c ON c.id = en.campaign_id
    WHERE en.lead_id = p_lead_id AND en.campaign_id <> p_campaign_id AND en.status = 'active'
      AND c.status IN ('active', 'paused')
      AND (p_before_at IS NULL OR (en.enrolled_at, en.id) < (p_before_at, p_before_id))
      AND NOT EXISTS (
          SELECT 1
          FROM outreach.sequence_steps last
          JOIN outreach.emails e ON e.step_id = last.id AND e.lead_id = p_lead_id
          WHERE last.campaign_id = c.id
            AND last.position = (SELECT max(s.position) FROM outreach.sequence_steps s
                                 WHERE s.campaign_id = c.id)
            AND e.status IN ('sent', 'failed', 'cancelled', 'suppressed'))
    ORDER BY en.enrolled_at, en.id
    LIMIT 1
$$;
