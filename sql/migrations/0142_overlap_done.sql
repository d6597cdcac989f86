-- 0142: outreach.lead_in_other_sequence (0134) agrees with the campaign finish (0133) on when a
-- sequence is over, and sees a sequence paused for a second approval (0127). Found by review:
-- a 'wait' campaign waited forever behind a sequence whose step 1 failed for good (its later
-- steps are never queued), and started a person whose other campaign was back in
-- awaiting_approval after an edit mid-sequence.
-- In a sequence now: an active enrolment in an active or paused campaign, or one awaiting a
-- second approval in which the lead's sequence has begun (it has emails there), none of whose emails ended without being sent (failed —
-- unconfirmed aside: a person still decides it —, cancelled, suppressed) and whose last step has
-- not been sent.
CREATE OR REPLACE FUNCTION outreach.lead_in_other_sequence(p_lead_id bigint, p_campaign_id bigint,
                                                           p_before_at timestamptz DEFAULT NULL,
                                                           p_before_id bigint DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT c.key
    FROM outreach.enrollments en
    JOIN outreach.campaigns c ON c.id = en.campaign_id
    WHERE en.lead_id = p_lead_id AND en.campaign_id <> p_campaign_id AND en.status = 'active'
      AND (c.status IN ('active', 'paused')
           OR (c.status = 'awaiting_approval'
               AND EXISTS (SELECT 1 FROM outreach.emails s1
                           WHERE s1.lead_id = p_lead_id AND s1.campaign_id = c.id)))
      AND (p_before_at IS NULL OR (en.enrolled_at, en.id) < (p_before_at, p_before_id))
      AND NOT EXISTS (
          SELECT 1
          FROM outreach.sequence_steps st
          JOIN outreach.emails e ON e.step_id = st.id AND e.lead_id = p_lead_id
          WHERE st.campaign_id = c.id
            AND ((e.status IN ('cancelled', 'suppressed')
                  OR (e.status = 'failed' AND e.failure_kind IS DISTINCT FROM 'unconfirmed'))
                 OR (e.status = 'sent'
                     AND st.position = (SELECT max(s.position) FROM outreach.sequence_steps s
                                        WHERE s.campaign_id = c.id))))
    ORDER BY en.enrolled_at, en.id
    LIMIT 1
$$;
