-- 0086: the claim's UPDATE never reads what it picked out of the partial queue index, whatever
-- the statistics say: by primary key, or on a table of a few thousand rows a sequential scan
-- (issue 16, the claim). Same signature and verdicts: CREATE OR REPLACE of
-- outreach.claim_emails_v1 (the versioned-function rule, 0018).
-- Measured on PostgreSQL 15 with 20,000 queued rows and the statistics of a database right after
-- queue-due (emails never analyzed, or analyzed while empty): the UPDATE's guard
-- `status = 'queued'` let the planner take outreach_emails_queued_idx for `id = ANY (v_picked)`,
-- a scan of the whole queue per claim (3.2-4.4 ms and 7,905 buffers for 50 rows, growing with the
-- queue) where the primary key takes 0.27 ms. Now the guard is IS NOT DISTINCT FROM: no partial
-- index on status matches it.

CREATE OR REPLACE FUNCTION outreach.claim_emails_v1(p_message_class text, p_mailbox_id bigint,
                                         p_limit integer, p_claim_token uuid, p_claimed_by text,
                                         p_now timestamptz DEFAULT NULL)
RETURNS SETOF outreach.emails
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_picked bigint[];
BEGIN
    IF p_message_class = 'marketing' THEN
        v_picked := ARRAY(
            SELECT q.id
            FROM outreach.emails q
            JOIN outreach.campaigns c ON c.id = q.campaign_id
            JOIN outreach.leads l ON l.id = q.lead_id
            WHERE q.status = 'queued'
              AND q.mailbox_id = p_mailbox_id
              AND q.scheduled_for <= v_now
              AND c.status = 'active'
              -- <= means = here (the next slot is never before v_now); written <= so the planner
              -- expects many rows to pass and walks the queue index in order to the limit.
              AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                          c.window_start, c.window_end) <= v_now
            ORDER BY q.scheduled_for, q.id
            LIMIT p_limit
            FOR NO KEY UPDATE OF q SKIP LOCKED);
    ELSIF p_message_class = 'transactional' THEN
        v_picked := ARRAY(
            SELECT q.id
            FROM outreach.emails q
            JOIN outreach.mailboxes mb ON mb.id = q.mailbox_id
            WHERE q.status = 'queued' AND q.message_class = 'transactional'
              AND q.mailbox_id = p_mailbox_id AND q.scheduled_for <= v_now
              AND mb.status = 'active'
            ORDER BY q.scheduled_for, q.id
            LIMIT p_limit
            FOR NO KEY UPDATE OF q SKIP LOCKED);
    ELSE
        RAISE EXCEPTION 'message class must be marketing or transactional, got %', p_message_class
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    UPDATE outreach.emails e
    SET status = 'sending', claim_token = p_claim_token, claimed_at = v_now,
        claimed_by = p_claimed_by, attempts = e.attempts + 1, updated_at = v_now
    -- The guard is written IS NOT DISTINCT FROM so that it cannot select a partial index on
    -- status (0086): with statistics that say few rows are queued (right after queue-due, before
    -- autovacuum's ANALYZE), `status = 'queued'` let the planner read the picked ids out of
    -- outreach_emails_queued_idx, a scan of the whole queue per claim, instead of the primary key.
    WHERE e.id = ANY (v_picked) AND e.status IS NOT DISTINCT FROM 'queued'
    RETURNING e.*;
END
$$;
