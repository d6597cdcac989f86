-- 0133: a campaign finishes by itself (issue 24, item 1): active or paused → finished once every
-- enrolment is done and nothing of it is in flight, by outreach.finish_campaigns_v1 (called by
-- queue-due after it queued, named query campaign_finish), with its campaign_events row in the
-- same statement. A finished campaign is final and takes no new enrolment (trigger
-- outreach_enrollments_refuse_finished); a campaign fed by a declared `source:` never finishes
-- by itself (fed_by_source, kept by campaign_upsert from the campaign file).
ALTER TABLE outreach.campaigns ADD COLUMN fed_by_source boolean NOT NULL DEFAULT false;

-- Finish every active or paused campaign (one, p_campaign_key; NULL: all) that
--   * is not fed by a source (a source may deliver new leads tomorrow),
--   * has at least one enrolment (an approved campaign waiting for its first import is not done),
--   * has no email row queued, sending, or failed as unconfirmed (a person still decides it),
--   * and has no enrolment that queue-due could still queue a step for, at any time: an active
--     enrolment of an unsuppressed lead with a step that has no email row yet and is the first
--     step or follows a sent one. That is email_queue_due's own condition without the clock and
--     without `requires` (a lead held for a missing field is queued once the field arrives, so it
--     keeps the campaign open). So an enrolment is done when it stopped (replied, stopped), its
--     lead is suppressed (unsubscribed, bounced, complained), its last step was sent, or its
--     latest step ended without being sent (failed, suppressed, cancelled): queue-due never
--     queues a step after one that was not sent.
-- Returns the finished campaigns. The candidates are locked first (FOR NO KEY UPDATE SKIP
-- LOCKED): an import holds its campaign's row from campaign_upsert to its commit, so a campaign
-- being imported into right now is skipped, and the UPDATE — a new statement, a new snapshot —
-- sees every enrolment committed by an import before the lock was granted. Skipped campaigns are
-- looked at again by the next queue-due.
CREATE FUNCTION outreach.finish_campaigns_v1(p_now timestamptz, p_campaign_key text)
RETURNS TABLE (campaign_id bigint, key text, finished_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    SELECT array_agg(c.id) INTO v_ids FROM (
        SELECT c.id FROM outreach.campaigns c
        WHERE c.status IN ('active', 'paused') AND NOT c.fed_by_source
          AND (p_campaign_key IS NULL OR c.key = p_campaign_key)
        ORDER BY c.id
        FOR NO KEY UPDATE SKIP LOCKED) c;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH done AS (
        UPDATE outreach.campaigns c
        SET status = 'finished', updated_at = coalesce(p_now, now())
        WHERE c.id = ANY (v_ids) AND c.status IN ('active', 'paused') AND NOT c.fed_by_source
          AND EXISTS (SELECT 1 FROM outreach.enrollments en WHERE en.campaign_id = c.id)
          AND NOT EXISTS (
              SELECT 1 FROM outreach.emails e
              WHERE e.campaign_id = c.id
                AND (e.status IN ('queued', 'sending')
                     OR (e.status = 'failed' AND e.failure_kind = 'unconfirmed')))
          AND NOT EXISTS (
              SELECT 1
              FROM outreach.enrollments en
              JOIN outreach.leads l ON l.id = en.lead_id
              JOIN outreach.sequence_steps st ON st.campaign_id = c.id
              LEFT JOIN outreach.sequence_steps prev
                     ON prev.campaign_id = c.id AND prev.position = st.position - 1
              LEFT JOIN outreach.emails pe ON pe.lead_id = en.lead_id AND pe.step_id = prev.id
              WHERE en.campaign_id = c.id AND en.status = 'active'
                AND (st.position = 1 OR pe.status = 'sent')
                AND NOT EXISTS (SELECT 1 FROM outreach.emails e
                                WHERE e.lead_id = en.lead_id AND e.step_id = st.id)
                AND NOT outreach.is_suppressed(l.email))
        RETURNING c.id, c.key, c.updated_at
    ), ev AS (
        INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
        SELECT d.id, 'finished', 'outreach',
               'every enrolment is done (last step sent, or the sequence stopped) and no email '
               'is queued, sending or unconfirmed', d.updated_at
        FROM done d
    )
    SELECT d.id, d.key, d.updated_at FROM done d ORDER BY d.id;
END
$$;

-- A finished campaign takes no new enrolment: its leads would never be mailed (queue-due
-- queues only active campaigns) and nobody would be told. The import does not try (it reports
-- each such line, lead_stage_mark_campaign_finished); this refuses one made any other way. The
-- campaigns are locked FOR SHARE, so a concurrent finish (outreach.finish_campaigns_v1, FOR NO
-- KEY UPDATE SKIP LOCKED) skips them until this transaction ends, and a finish that committed
-- first is seen here (a locked row is re-read at its latest version).
CREATE FUNCTION outreach.enrollments_refuse_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
BEGIN
    PERFORM FROM outreach.campaigns c
    WHERE c.id IN (SELECT n.campaign_id FROM new_enrollments n)
    ORDER BY c.id FOR SHARE;
    SELECT c.key INTO v_key FROM outreach.campaigns c
    WHERE c.id IN (SELECT n.campaign_id FROM new_enrollments n) AND c.status = 'finished'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'campaign % is finished: it takes no new enrolment', v_key
            USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_enrollments_campaign_open';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER outreach_enrollments_refuse_finished
    AFTER INSERT ON outreach.enrollments
    REFERENCING NEW TABLE AS new_enrollments
    FOR EACH STATEMENT EXECUTE FUNCTION outreach.enrollments_refuse_finished();
