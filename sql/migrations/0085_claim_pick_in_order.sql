-- 0085: the claim's pick reads the queue in order (issue 16, the claim). Same signature and
-- verdicts: CREATE OR REPLACE of outreach.claim_emails_v1 (the versioned-function rule, 0018).
-- The window test was `outreach.next_send_slot(v_now, …) = v_now`; next_send_slot never returns
-- a moment before the one it is given, so `<= v_now` is the same test. With `=` the planner
-- estimated a handful of the mailbox's queued rows to pass, so it joined every queued row of the
-- mailbox to its lead and campaign by hash, ran next_send_slot on each and sorted them before
-- keeping p_limit: 13 ms a claim at 2,500 queued rows (PG15, EXPLAIN ANALYZE), growing with the
-- queue, all under the mailbox lock. With `<=` it walks outreach_emails_queued_idx in order with
-- index lookups of the lead and campaign and stops at the limit: 2.3 ms.

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
    WHERE e.status = 'queued' AND e.id = ANY (v_picked)
    RETURNING e.*;
END
$$;
