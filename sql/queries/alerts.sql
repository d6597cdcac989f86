-- Operator alerts (outreach.alerts): deduplicated by a UNIQUE event key, so an event alerts once.

-- name: alert_claim_many
-- Whoever inserts an event key sends its alert; everyone else gets no row. One alert may cover
-- many events (a run's new unconfirmed emails: one key each); returns the keys that were new.
-- Run inside the transaction that delivers the alert: a concurrent claim of the same key waits
-- on the unique index until that transaction ends (then gets nothing), and a failed delivery
-- rolls back so the next run tries again.
INSERT INTO outreach.alerts (event_key, kind, subject, body)
SELECT k, %(kind)s, %(subject)s, %(body)s FROM unnest(%(event_keys)s::text[]) WITH ORDINALITY AS t(k, i)
ORDER BY i
ON CONFLICT ON CONSTRAINT outreach_alerts_event_key_key DO NOTHING
RETURNING event_key;

-- name: alert_describe
-- What the alert said, once it is composed from the new keys.
UPDATE outreach.alerts SET subject = %(subject)s, body = %(body)s
WHERE event_key = ANY (%(event_keys)s::text[]);

-- name: alert_list
SELECT id, event_key, kind, subject, body, created_at FROM outreach.alerts ORDER BY id;

-- name: alert_keys_absent
-- Which of these event keys no alert (or Required Action) has claimed yet, in the order given:
-- the send run's after_send updates the review asset while any unconfirmed email is not
-- listed by a Required Action (key review:<id>), so a review run missed while its DAG was
-- paused is caught up by the next send run.
SELECT k AS event_key
FROM unnest(%(event_keys)s::text[]) WITH ORDINALITY AS t(k, i)
WHERE NOT EXISTS (SELECT 1 FROM outreach.alerts a WHERE a.event_key = t.k)
ORDER BY i;
