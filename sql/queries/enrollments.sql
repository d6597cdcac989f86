-- Enrolments: stopping one (an operator, a reply) and the pre-send check that honours a stop.
-- The stop itself is the SQL function outreach.stop_enrollment (migration 0012): it stops the
-- enrolment and cancels every queued step of it in the caller's transaction.

-- name: enrollment_find
-- The enrolment of a lead (normalised address) in a campaign (key), locked for the rest of the
-- transaction so that what a stop reports (changed or already stopped) is what it did.
SELECT en.id, en.status, en.stopped_at, en.stopped_by, en.stop_reason, en.lead_id,
       en.campaign_id, l.email, c.key AS campaign_key
FROM outreach.enrollments en
JOIN outreach.leads l ON l.id = en.lead_id
JOIN outreach.campaigns c ON c.id = en.campaign_id
WHERE l.email = %(email)s AND c.key = %(campaign_key)s
FOR UPDATE OF en;

-- name: enrollment_stop
-- Stop one enrolment ('stopped' or 'replied') and cancel its queued steps; returns how many.
SELECT outreach.stop_enrollment(%(enrollment_id)s, %(status)s, %(reason)s, %(by)s) AS cancelled;

-- name: email_cancel_stopped
-- The pre-send check's second half (next to the suppression check): a claimed row whose enrolment
-- is no longer active ends 'cancelled' without a handoff. Guarded by our claim token like every
-- transition of a claimed row; no row back: the enrolment is active (or the claim was taken, which
-- the heartbeat right before the handoff finds). Transactional rows have no enrolment.
UPDATE outreach.emails e
SET status = 'cancelled', updated_at = now(),
    last_error = format('enrolment %%s %%s by %%s before the handoff: %%s', en.id, en.status,
                        en.stopped_by, en.stop_reason)
FROM outreach.enrollments en
WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
  AND en.campaign_id = e.campaign_id AND en.lead_id = e.lead_id AND en.status <> 'active'
RETURNING e.id, en.status AS enrollment_status;
