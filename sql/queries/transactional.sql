-- Transactional mail: the enqueue is the SQL function outreach.enqueue_transactional
-- (migration 0006), so an application that does not use Python calls the same thing.

-- name: transactional_enqueue
SELECT email_id, created, status, message_key
FROM outreach.enqueue_transactional(%(delivery_key)s, %(recipient)s, %(template)s,
                                    %(context)s, %(mailbox)s);

-- name: transactional_by_key
-- The one row of a delivery key, with its send-log entry when it was sent.
SELECT e.id, e.status::text AS status, e.failure_kind, e.attempts, e.recipient, e.template,
       e.last_error, e.idempotency_key, sl.message_id, sl.accepted_at, sl.source AS log_source
FROM outreach.emails e
LEFT JOIN outreach.send_log sl ON sl.email_id = e.id
WHERE e.delivery_key = %(delivery_key)s;
