-- 0111: the per-person frequency cap across campaigns (issue 25, item 1). A person is one lead
-- row (outreach.leads.email is the one normal form, UNIQUE), so a person's touches are the lead's
-- marketing rows that are sending or sent (or failed as unconfirmed: they may have gone out),
-- counted by claimed_at over the UTC day and the last 7 days. The cap is decided inside the claim
-- (outreach.claim_emails_v2), per picked row, under a transaction-scoped advisory lock on the
-- person: two concurrent claimers (any campaign, any mailbox) never both take the same person,
-- because the second one's pg_try_advisory_xact_lock fails while the first is uncommitted (it
-- skips the row this time, leaving it queued), and once the first committed, the second's count
-- (a fresh snapshot per statement, READ COMMITTED) sees its row. try-lock never waits, so locks
-- taken in different orders cannot deadlock.
-- A row over the cap is not failed: it stays queued, scheduled_for moves to when the cap next
-- allows it, and hold_reason says why (cleared when it is claimed).
-- claim_emails_v1 stays for senders of the previous release (the versioned-function rule, 0018).
ALTER TABLE outreach.emails ADD COLUMN hold_reason text;
COMMENT ON COLUMN outreach.emails.hold_reason IS
    'why the claim held this queued row back and moved scheduled_for (contact policy); NULL: not held';

CREATE FUNCTION outreach.claim_emails_v2(p_message_class text, p_mailbox_id bigint,
                                         p_limit integer, p_claim_token uuid, p_claimed_by text,
                                         p_now timestamptz DEFAULT NULL,
                                         p_person_per_day integer DEFAULT NULL,
                                         p_person_per_week integer DEFAULT NULL)
RETURNS SETOF outreach.emails
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_today timestamptz := date_trunc('day', coalesce(p_now, now()) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    v_picked bigint[];
    v_row record;
    v_day integer;
    v_week integer;
    v_oldest timestamptz;
BEGIN
    IF p_message_class <> 'marketing' OR (p_person_per_day IS NULL AND p_person_per_week IS NULL) THEN
        RETURN QUERY SELECT * FROM outreach.claim_emails_v1(p_message_class, p_mailbox_id, p_limit,
                                                            p_claim_token, p_claimed_by, v_now);
        RETURN;
    END IF;
    IF p_person_per_day < 1 OR p_person_per_week < 1 THEN
        RAISE EXCEPTION 'contact caps must be at least 1 (or NULL: off), got % a day, % a week',
                        p_person_per_day, p_person_per_week
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The pick of claim_emails_v1 (its comments say why it is written so).
    v_picked := ARRAY(
        SELECT q.id
        FROM outreach.emails q
        JOIN outreach.campaigns c ON c.id = q.campaign_id
        JOIN outreach.leads l ON l.id = q.lead_id
        WHERE q.status = 'queued'
          AND q.mailbox_id = p_mailbox_id
          AND q.scheduled_for <= v_now
          AND c.status = 'active'
          AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                      c.window_start, c.window_end) <= v_now
        ORDER BY q.scheduled_for, q.id
        LIMIT p_limit
        FOR NO KEY UPDATE OF q SKIP LOCKED);
    FOR v_row IN SELECT q.id, q.lead_id FROM outreach.emails q WHERE q.id = ANY (v_picked)
                 ORDER BY q.scheduled_for, q.id LOOP
        -- The person's lock, held to the end of the claim's transaction. Held by another claimer:
        -- skip the row this time (it stays queued, untouched).
        IF NOT pg_try_advisory_xact_lock(hashtextextended('outreach.person:' || v_row.lead_id, 0)) THEN
            CONTINUE;
        END IF;
        SELECT count(*) FILTER (WHERE e.claimed_at >= v_today)::integer, count(*)::integer,
               min(e.claimed_at)
        INTO v_day, v_week, v_oldest
        FROM outreach.emails e
        WHERE e.lead_id = v_row.lead_id AND e.message_class = 'marketing'
          AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
          AND e.claimed_at > v_now - interval '7 days';
        IF v_day >= coalesce(p_person_per_day, 2147483647)
           OR v_week >= coalesce(p_person_per_week, 2147483647) THEN
            UPDATE outreach.emails e
            SET scheduled_for = CASE
                    WHEN v_week >= coalesce(p_person_per_week, 2147483647)
                    THEN greatest(v_oldest + interval '7 days', v_today + interval '1 day')
                    ELSE v_today + interval '1 day' END,
                hold_reason = CASE
                    WHEN v_week >= coalesce(p_person_per_week, 2147483647)
                    THEN 'frequency cap: ' || p_person_per_week || ' a week'
                    ELSE 'frequency cap: ' || p_person_per_day || ' a day' END,
                updated_at = v_now
            WHERE e.id = v_row.id AND e.status IS NOT DISTINCT FROM 'queued';
            CONTINUE;
        END IF;
        RETURN QUERY
        UPDATE outreach.emails e
        SET status = 'sending', claim_token = p_claim_token, claimed_at = v_now,
            claimed_by = p_claimed_by, attempts = e.attempts + 1, updated_at = v_now,
            hold_reason = NULL
        WHERE e.id = v_row.id AND e.status IS NOT DISTINCT FROM 'queued'
        RETURNING e.*;
    END LOOP;
END
$$;
