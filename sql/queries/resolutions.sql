-- Operator decisions: resolving unconfirmed emails (each statement guarded by status = 'failed'
-- AND failure_kind = 'unconfirmed', so resolving twice changes nothing), and requeuing emails
-- whose attempts were exhausted without ever being accepted (guarded by failure_kind
-- 'retries_exhausted').

-- name: resolution_begin
-- Declares this transaction an operator resolution (checked by the emails_guard_unconfirmed
-- trigger); SET LOCAL ends with the transaction.
SELECT set_config('outreach.resolution', 'operator', true);

-- name: email_list_unconfirmed
-- Unconfirmed emails, by ids or by campaign and/or mailbox (NULL: any).
SELECT e.id, e.idempotency_key, e.last_error, e.claimed_by, e.claimed_at, e.attempts,
       e.handed_over_at, e.late_accepted_at, e.late_accept_reply, e.late_accept_message_id,
       coalesce(l.email, e.recipient) AS email, m.address AS mailbox_address,
       m.id AS mailbox_id, m.imap_conn_id, c.key AS campaign_key, e.message_class
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
LEFT JOIN outreach.campaigns c ON c.id = e.campaign_id
WHERE e.status = 'failed' AND e.failure_kind = 'unconfirmed'
  AND (%(ids)s::bigint[] IS NULL OR e.id = ANY (%(ids)s::bigint[]))
  AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
  AND (%(mailbox)s::text IS NULL OR m.address = lower(%(mailbox)s::text)
       OR m.id::text = %(mailbox)s::text)
ORDER BY e.id;

-- name: email_resolve_was_sent
-- A person saw it in Sent Items (or the server's late acceptance is evidence enough): record it
-- in the send log as operator-confirmed and mark the row sent, in one statement. The send log's
-- acceptance time is the server's late acceptance when there was one, else the claim time.
WITH done AS (
    UPDATE outreach.emails e
    SET status = 'sent', failure_kind = NULL,
        sent_at = coalesce(e.late_accepted_at, e.claimed_at, now()),
        last_error = NULL, updated_at = now()
    WHERE e.id = %(email_id)s AND e.status = 'failed' AND e.failure_kind = 'unconfirmed'
    RETURNING e.id, e.mailbox_id, e.sent_at
)
INSERT INTO outreach.send_log (email_id, mailbox_id, message_id, smtp_reply, source, accepted_at)
SELECT done.id, done.mailbox_id, %(message_id)s, %(note)s, 'operator', done.sent_at
FROM done
RETURNING email_id;

-- name: email_resolve_not_sent
-- A person checked: it did not go out. Back to the queue with the same idempotency key, so the
-- next attempt carries the same Message-ID.
UPDATE outreach.emails e
SET status = 'queued', failure_kind = NULL, scheduled_for = now(), updated_at = now(),
    handed_over_at = NULL, late_accepted_at = NULL, late_accept_reply = NULL,
    late_accept_message_id = NULL,
    last_error = 'operator: not sent, requeued (' || %(note)s || ')'
WHERE e.id = %(email_id)s AND e.status = 'failed' AND e.failure_kind = 'unconfirmed'
RETURNING e.id;

-- name: resolution_insert
-- %(evidence)s: what the operator was shown besides Sent Items (a late acceptance), or NULL.
INSERT INTO outreach.email_resolutions (email_id, decision, resolved_by, note, evidence)
VALUES (%(email_id)s, %(decision)s, %(resolved_by)s, %(note)s, %(evidence)s)
RETURNING id;

-- name: email_requeue_failed
-- An operator puts not-accepted failures back in the queue (outreach requeue / the
-- outreach_requeue DAG), after fixing what made every attempt fail (a relay down for an hour, a
-- full mailbox since emptied). Only failure_kind 'retries_exhausted': nothing of those was ever
-- accepted, so another attempt cannot send twice. Never 'unconfirmed' (may have gone out: its
-- own resolution) nor 'permanent'/'render' (they would fail the same way). Guarded by status and
-- failure kind in one statement, so requeuing twice changes nothing; the row gets its full
-- attempts again (same idempotency key, so the same Message-ID), and the requeue is recorded
-- with who, why and the failure it came from. %(ids)s, %(campaign_key)s, %(mailbox)s: NULL = any.
WITH picked AS (
    SELECT e.id, e.failure_kind, e.last_error, e.attempts
    FROM outreach.emails e
    JOIN outreach.mailboxes m ON m.id = e.mailbox_id
    LEFT JOIN outreach.campaigns c ON c.id = e.campaign_id
    WHERE e.status = 'failed' AND e.failure_kind = 'retries_exhausted'
      AND e.failure_kind = %(failure_kind)s
      AND (%(ids)s::bigint[] IS NULL OR e.id = ANY (%(ids)s::bigint[]))
      AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
      AND (%(mailbox)s::text IS NULL OR m.address = lower(%(mailbox)s::text)
           OR m.id::text = %(mailbox)s::text)
    ORDER BY e.id
    FOR UPDATE OF e
),
done AS (
    UPDATE outreach.emails e
    SET status = 'queued', failure_kind = NULL, attempts = 0, handed_over_at = NULL,
        scheduled_for = now(), updated_at = now(),
        last_error = format('operator %%s requeued it (%%s); was: %%s', %(requeued_by)s::text,
                            %(reason)s::text, p.last_error)
    FROM picked p
    WHERE e.id = p.id AND e.status = 'failed' AND e.failure_kind = 'retries_exhausted'
    RETURNING e.id
)
INSERT INTO outreach.email_requeues (email_id, failure_kind, last_error, attempts, requeued_by, reason)
SELECT p.id, p.failure_kind, p.last_error, p.attempts, %(requeued_by)s, %(reason)s
FROM picked p JOIN done d ON d.id = p.id
RETURNING email_id, attempts, last_error;

-- name: email_failure_state
-- The status and failure kind of emails by id (to say why a requested id was not requeued).
SELECT id, status::text AS status, failure_kind FROM outreach.emails
WHERE id = ANY (%(ids)s::bigint[]) ORDER BY id;
