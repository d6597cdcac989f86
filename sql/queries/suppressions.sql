-- Suppressions. Whether an address is suppressed is decided only by outreach.is_suppressed().
-- Every suppression added or removed is recorded in outreach.suppression_events by a trigger
-- (migration 0003).

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

-- name: suppression_actor_set
-- Who is acting and why, for the history rows the trigger writes in this transaction
-- (transaction-local settings: they vanish at commit or rollback).
SELECT set_config('outreach.actor', %(actor)s, true) AS actor,
       set_config('outreach.note', %(note)s, true) AS note;

-- name: suppression_remove
-- Unsuppress: remove the active suppression; the trigger records the 'unsuppress' event.
DELETE FROM outreach.suppressions
WHERE kind = %(kind)s AND value = %(value)s
RETURNING id, kind, value, reason, source, created_at;

-- name: suppression_history
-- Every suppress/unsuppress event of one address or domain, oldest first.
SELECT id, action, kind, value, reason, source, actor, note, created_at
FROM outreach.suppression_events
WHERE kind = %(kind)s AND value = %(value)s
ORDER BY created_at, id;

-- name: email_unsubscribe_target
-- The email row an unsubscribe token names, with the address it went (or will go) to.
SELECT e.id, e.status::text AS status, l.email
FROM outreach.emails e
JOIN outreach.leads l ON l.id = e.lead_id
WHERE e.id = %(email_id)s;
