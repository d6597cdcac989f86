-- Delivery failures (outreach.bounces): one row per failed recipient of one email, whatever
-- reported it (our SMTP session, a DSN read from an inbox, an ESP event). The table's rules are in
-- migration 0091; what each owner causes: docs/explanation/bounces-and-complaints.md.

-- name: failure_lock
-- Serialises the rules about one key (an address, a sending domain) until the transaction ends:
-- two reports read at once each count what the other committed (READ COMMITTED: the next
-- statement's snapshot is taken after the lock is granted), so a threshold is never missed.
SELECT pg_advisory_xact_lock(hashtextextended('outreach-failures:' || %(key)s::text, 0)) IS NULL
       AS locked;

-- name: failure_record
-- The record that decides who applies the effect: a conflict on the source (the same report
-- again) or on (email, address) (another report of the same failure) returns no row, and the
-- caller applies nothing.
INSERT INTO outreach.delivery_failures (source, email_id, mailbox_id, address, reason, owner,
                                        status, diagnostic, occurred_at)
VALUES (%(source)s, %(email_id)s, %(mailbox_id)s, %(address)s, %(reason)s, %(owner)s,
        %(status)s, %(diagnostic)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT DO NOTHING
RETURNING id;

-- name: failure_mark_email
-- The reason, status and diagnostic of the email's failure, shown by outreach and the campaign
-- page. Never changes the status: a DSN about a sent email leaves it sent (the server accepted
-- it; the send log stays), an SMTP failure was already marked failed by email_mark_failed.
UPDATE outreach.emails
SET failure_reason = %(reason)s, failure_status = %(status)s, failure_diagnostic = %(diagnostic)s,
    updated_at = now()
WHERE id = %(email_id)s
RETURNING id;

-- name: failure_soft_days
-- The soft-bounce rule's figure: on how many different UTC days the address failed transiently
-- in the %(window)s up to now.
SELECT count(DISTINCT (f.occurred_at AT TIME ZONE 'UTC')::date)::integer AS days
FROM outreach.delivery_failures f
WHERE f.address = %(address)s AND f.owner = 'transient'
  AND f.occurred_at > coalesce(%(now)s::timestamptz, now()) - %(window)s::interval
  AND f.occurred_at <= coalesce(%(now)s::timestamptz, now());

-- name: failure_block_counts
-- The block rule's figures for every mailbox of the sending domain of %(mailbox_id)s: its own
-- sender blocks and authfailures since the later of the window's start and its last resume, and
-- the domain's (every mailbox of the domain, since the domain's latest resume).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
dom AS (SELECT split_part(address, '@', 2) AS domain FROM outreach.mailboxes
        WHERE id = %(mailbox_id)s),
mb AS (
    SELECT m.id, m.address, m.status,
           greatest(n.now - %(window)s::interval,
                    (SELECT max(ev.created_at) FROM outreach.mailbox_events ev
                     WHERE ev.mailbox_id = m.id AND ev.event = 'resumed')) AS since
    FROM outreach.mailboxes m CROSS JOIN n CROSS JOIN dom
    WHERE split_part(m.address, '@', 2) = dom.domain
),
d AS (SELECT max(since) AS since FROM mb)
SELECT mb.id, mb.address, mb.status, mb.since, dom.domain,
       (SELECT count(*) FROM outreach.delivery_failures f
        WHERE f.mailbox_id = mb.id AND f.owner = 'sender' AND f.occurred_at > mb.since)::integer
           AS blocks,
       (SELECT count(*) FROM outreach.delivery_failures f
        WHERE f.mailbox_id = mb.id AND f.owner = 'sender' AND f.reason = 'authfailure'
          AND f.occurred_at > mb.since)::integer AS authfailures,
       (SELECT count(*) FROM outreach.delivery_failures f
        WHERE f.mailbox_id IN (SELECT id FROM mb) AND f.owner = 'sender'
          AND f.occurred_at > d.since)::integer AS domain_blocks,
       (SELECT count(*) FROM outreach.delivery_failures f
        WHERE f.mailbox_id IN (SELECT id FROM mb) AND f.owner = 'sender'
          AND f.reason = 'authfailure' AND f.occurred_at > d.since)::integer AS domain_authfailures
FROM mb CROSS JOIN d CROSS JOIN dom
ORDER BY mb.id;

-- name: failure_list_for_address
-- Every failure of an address, oldest first (outreach lead show).
SELECT f.id, f.source, f.email_id, f.reason, f.owner, f.status, f.diagnostic, f.occurred_at
FROM outreach.delivery_failures f
WHERE f.address = %(address)s
ORDER BY f.occurred_at, f.id;
