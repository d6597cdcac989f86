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
