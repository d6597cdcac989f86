-- Suppressions. Whether an address is suppressed is decided only by outreach.is_suppressed().
-- Every suppression added or removed is recorded in outreach.suppression_events by a trigger
-- (migration 0003).

-- name: suppression_insert
INSERT INTO outreach.suppressions (kind, value, reason, source)
VALUES (%(kind)s, %(value)s, %(reason)s, %(source)s)
ON CONFLICT ON CONSTRAINT outreach_suppressions_value_key DO NOTHING
RETURNING id;

-- name: suppression_check
SELECT outreach.is_suppressed(%(address)s, %(message_class)s) AS suppressed;

-- name: email_cancel_suppressed
-- Queued emails of addresses that are now suppressed (for their message class) are cancelled in
-- the same transaction as the suppression. Rows already 'sending' are left alone: the pre-send
-- check stops them.
UPDATE outreach.emails e
SET status = 'suppressed', updated_at = now()
WHERE e.status = 'queued'
  AND outreach.is_suppressed(coalesce(e.recipient, (SELECT l.email FROM outreach.leads l
                                                    WHERE l.id = e.lead_id)),
                             e.message_class)
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
SELECT e.id, e.status::text AS status, coalesce(l.email, e.recipient) AS email, e.message_class
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
WHERE e.id = %(email_id)s;
