-- What a send run did, read back from the ledger (not from its plan), and the operator alerts.
-- A send task stamps claimed_by with '<dag id>/<run id>/<task id>[<map index>]#try<n>'
-- (outreach.airflow_adapter.worker_for), so a run's rows are those whose claimed_by starts with
-- '<dag id>/<run id>/': a cleared or retried try is part of the same run. A row the run sent back
-- to the queue (4xx, released) counts as requeued until another run claims it.

-- name: email_run_outcomes
-- Per mailbox, what the rows a run (or one task try: a full worker name) claimed are now.
-- left(…) = prefix, not LIKE: run ids contain '_' (a LIKE wildcard).
SELECT e.mailbox_id, m.label, m.display_name, m.address,
       count(*)::integer AS claimed,
       count(*) FILTER (WHERE e.status = 'sent')::integer AS sent,
       count(*) FILTER (WHERE e.failure_kind = 'unconfirmed')::integer AS unconfirmed,
       count(*) FILTER (WHERE e.status = 'failed' AND e.failure_kind <> 'unconfirmed')::integer AS failed,
       count(*) FILTER (WHERE e.status = 'queued')::integer AS requeued,
       count(*) FILTER (WHERE e.status = 'sending')::integer AS sending,
       count(*) FILTER (WHERE e.status = 'suppressed')::integer AS suppressed,
       coalesce(array_agg(e.id ORDER BY e.id) FILTER (WHERE e.failure_kind = 'unconfirmed'),
                '{}') AS unconfirmed_ids
FROM outreach.emails e
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE left(e.claimed_by, length(%(worker_prefix)s::text)) = %(worker_prefix)s::text
GROUP BY e.mailbox_id, m.label, m.display_name, m.address
ORDER BY e.mailbox_id;

-- name: mailbox_names
-- Every mailbox's label, display name and address (callers name it with logutil.mailbox_name).
SELECT id, label, display_name, address FROM outreach.mailboxes ORDER BY id;

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

-- name: alerts_list
SELECT id, event_key, kind, subject, body, created_at FROM outreach.alerts ORDER BY id;

-- name: email_unconfirmed_details
-- Unconfirmed emails (all, or %(ids)s) with what a person needs to decide: campaign and step,
-- mailbox name, claim and handoff, the last error, a late acceptance, the IMAP account whose
-- Sent folder may hold it (outreach.resolve.unconfirmed_details).
SELECT e.id, e.idempotency_key, e.message_class, e.template, e.last_error, e.claimed_at,
       e.claimed_by, e.handed_over_at, e.late_accepted_at, e.late_accept_reply,
       e.late_accept_message_id, coalesce(l.email, e.recipient) AS email, c.key AS campaign_key,
       st.position AS step, m.id AS mailbox_id, m.address AS mailbox_address, m.label,
       m.display_name, m.imap_conn_id
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
LEFT JOIN outreach.campaigns c ON c.id = e.campaign_id
LEFT JOIN outreach.sequence_steps st ON st.id = e.step_id
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE e.status = 'failed' AND e.failure_kind = 'unconfirmed'
  AND (%(ids)s::bigint[] IS NULL OR e.id = ANY (%(ids)s::bigint[]))
ORDER BY e.id;

-- name: mailbox_auto_pauses
-- Automatic pauses (by the spam-rate, bounce-rate or complaint-rate rule) of the last 7 days, for their alerts.
SELECT ev.id, ev.mailbox_id, ev.actor, ev.reason, ev.created_at
FROM outreach.mailbox_events ev
WHERE ev.event = 'paused' AND ev.actor IN ('postmaster', 'bounce-rate', 'complaint-rate')
  AND ev.created_at > now() - interval '7 days'
ORDER BY ev.id;
