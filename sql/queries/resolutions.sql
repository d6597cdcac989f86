-- Operator decisions: resolving unconfirmed emails (each statement guarded by status = 'failed'
-- AND failure_kind = 'unconfirmed', so resolving twice changes nothing), and requeuing emails
-- whose attempts were exhausted without ever being accepted (guarded by failure_kind
-- 'retries_exhausted').

-- name: resolution_begin
-- Declares this transaction an operator resolution (checked by the emails_guard_unconfirmed
-- trigger); SET LOCAL ends with the transaction.
SELECT set_config('outreach.resolution', 'operator', true);

-- name: resolution_insert
-- %(evidence)s: what the operator was shown besides Sent Items (a late acceptance), or NULL.
INSERT INTO outreach.email_resolutions (email_id, decision, resolved_by, note, evidence)
VALUES (%(email_id)s, %(decision)s, %(resolved_by)s, %(note)s, %(evidence)s)
RETURNING id;
