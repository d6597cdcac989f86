-- Suppressions. Whether an address is suppressed is decided only by outreach.is_suppressed().

-- name: suppression_insert
INSERT INTO outreach.suppressions (kind, value, reason, source)
VALUES (%(kind)s, %(value)s, %(reason)s, %(source)s)
ON CONFLICT ON CONSTRAINT outreach_suppressions_value_key DO NOTHING
RETURNING id;

-- name: suppression_check
SELECT outreach.is_suppressed(%(address)s) AS suppressed;

-- name: email_cancel_suppressed
-- Queued steps of addresses that are now suppressed are cancelled in the same transaction as the
-- suppression. Rows already 'sending' are left alone: the pre-send check stops them.
UPDATE outreach.emails e
SET status = 'suppressed', updated_at = now()
FROM outreach.leads l
WHERE l.id = e.lead_id AND e.status = 'queued' AND outreach.is_suppressed(l.email)
RETURNING e.id;
