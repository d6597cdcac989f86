-- 0018: the claim is one stored function (issue 13). Until now the claim's locking SELECT and its
-- UPDATE … RETURNING were written twice, in the named queries email_claim_batch (campaign mail)
-- and email_claim_transactional; both now call outreach.claim_emails_v1, and only the rows they
-- read around it (what a message of each class is built from) stay in sql/queries/emails.sql.
--
-- Versioned name: a changed signature or return type is a new function (claim_emails_v2) created
-- in a new migration next to this one, the named queries move to it, and a later migration drops
-- claim_emails_v1 — so a sender still running the previous release keeps a claim that works
-- while the new one is rolled out. A fix that keeps the signature is CREATE OR REPLACE of the
-- same version.

-- Claim up to p_limit due rows of one mailbox for one sender, and return them as they now are
-- ('sending', a fresh claim token, claimed_at = the claim's moment, attempts + 1).
--   p_message_class  'marketing': queued campaign rows of an active campaign whose send window
--                    (outreach.next_send_slot, in the lead's time zone, else the campaign's) is
--                    open now; the caller holds the mailbox lock and caps p_limit by the pacing
--                    rule (mailbox_remaining_today). 'transactional': queued transactional rows
--                    of an active mailbox; no window, cap or warm-up holds them back.
--   p_now            the claim's moment (NULL: now()); tests pass a fixed clock.
-- The rows are locked FOR NO KEY UPDATE SKIP LOCKED (the lock the UPDATE takes anyway): two
-- claims skip each other's rows, and rows that reference a claimed email (its send_log row) are
-- not held up. The locking SELECT runs exactly once, as its own statement: written inline as
-- `e.id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)` the planner may run it as a subplan
-- rescanned per row, each rescan skipping the rows the statement already updated and returning
-- the next n — one claim took a mailbox's whole queue (CI failure of 2026-11-30; until 0018 the
-- named queries ran it once as a MATERIALIZED CTE). The UPDATE is guarded by status = 'queued'.
-- Raises invalid_parameter_value for another message class.
CREATE FUNCTION outreach.claim_emails_v1(p_message_class text, p_mailbox_id bigint,
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
              AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                          c.window_start, c.window_end) = v_now
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
