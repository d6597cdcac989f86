-- 0098: rows claimed but never handed over come back soon after their sender died (issue 29).
-- A live sender refreshes claim_heartbeat_at of its claim's unstamped rows every few seconds
-- (email_heartbeat_claim); the reaper (email_reap_stale) puts an unstamped row whose claim and
-- heartbeat are both older than the short release threshold back in the queue. Stamped rows keep
-- the 30-minute rule (unconfirmed, for a person). A separate column, not claimed_at: claimed_at
-- is what the daily cap counts (outreach_emails_count_claims_update).

ALTER TABLE outreach.emails ADD COLUMN claim_heartbeat_at timestamptz;
COMMENT ON COLUMN outreach.emails.claim_heartbeat_at IS
    'last heartbeat of the live sender holding this claim (unstamped rows only); NULL: none yet';
