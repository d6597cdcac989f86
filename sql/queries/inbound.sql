-- Inbound messages (outreach.inbox): the table's rules are in migration 0011. Each message is one
-- transaction: match it (the email_/lead_ queries below), record it (inbound_insert, which decides
-- who applies the effect), apply the effect, set the effect text, advance the cursor.

-- name: inbound_targets
-- Every mailbox with an IMAP account to read, and the shared unsubscribe accounts.
SELECT id, address, imap_conn_id, unsubscribe_imap_conn_id
FROM outreach.mailboxes
WHERE imap_conn_id IS NOT NULL OR unsubscribe_imap_conn_id IS NOT NULL
ORDER BY id;

-- name: inbound_cursor_get
SELECT last_uid FROM outreach.inbound_cursors
WHERE account = %(account)s AND folder = %(folder)s AND uidvalidity = %(uidvalidity)s;

-- name: inbound_cursor_advance
-- Only upwards: a reader that finishes late never moves the cursor back.
INSERT INTO outreach.inbound_cursors AS c (account, folder, uidvalidity, last_uid)
VALUES (%(account)s, %(folder)s, %(uidvalidity)s, %(uid)s)
ON CONFLICT ON CONSTRAINT outreach_inbound_cursors_pkey DO UPDATE
SET last_uid = greatest(c.last_uid, excluded.last_uid), updated_at = now()
RETURNING last_uid;

-- name: inbound_first_send
-- When the mailboxes read from an account first sent anything: with no cursor for the folder's
-- UIDVALIDITY, the reader asks only for messages since the day before (older mail cannot answer
-- us, and a lead's earlier mail must not stop a sequence).
SELECT min(s.accepted_at) AS first_send
FROM outreach.send_log s
WHERE %(mailbox_ids)s::bigint[] IS NULL OR s.mailbox_id = ANY (%(mailbox_ids)s::bigint[]);

-- name: inbound_insert
-- The record that decides who applies the effect: a conflict on either UNIQUE constraint (the
-- same UID, or the same Message-ID after a UIDVALIDITY change) returns no row, and the caller
-- applies nothing. A second reader inserting the same message waits for the first's commit.
INSERT INTO outreach.inbound_messages (account, folder, uidvalidity, uid, mailbox_id, message_id,
                                       from_address, subject, class, evidence, email_id, lead_id,
                                       address, dsn_status, received_at)
VALUES (%(account)s, %(folder)s, %(uidvalidity)s, %(uid)s, %(mailbox_id)s, %(message_id)s,
        %(from_address)s, %(subject)s, %(class)s, %(evidence)s, %(email_id)s, %(lead_id)s,
        %(address)s, %(dsn_status)s, %(received_at)s)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: inbound_set_effect
UPDATE outreach.inbound_messages SET effect = %(effect)s WHERE id = %(id)s RETURNING id;

-- name: email_by_message_ids
-- Our sent emails whose Message-ID (send_log, without <>) is one of %(ids)s (lower-cased by the
-- caller: ours are lower-case), with what a reply or bounce needs to act on.
SELECT e.id, e.lead_id, e.campaign_id, e.mailbox_id, s.message_id, e.message_class,
       coalesce(l.email, e.recipient) AS email
FROM outreach.send_log s
JOIN outreach.emails e ON e.id = s.email_id
LEFT JOIN outreach.leads l ON l.id = e.lead_id
WHERE s.message_id = ANY (%(ids)s::text[]);

-- name: email_latest_sent_to
-- The latest email a mailbox (or any, %(mailbox_id)s NULL) sent to a lead's address: what a
-- bounce or complaint without our Message-ID is about.
SELECT e.id, e.lead_id, e.campaign_id, e.mailbox_id, e.message_class, l.email
FROM outreach.leads l
JOIN outreach.emails e ON e.lead_id = l.id
WHERE l.email = %(address)s AND e.status = 'sent'
  AND (%(mailbox_id)s::bigint IS NULL OR e.mailbox_id = %(mailbox_id)s::bigint)
ORDER BY e.sent_at DESC NULLS LAST, e.id DESC
LIMIT 1;

-- name: lead_by_address
SELECT id, email FROM outreach.leads WHERE email = %(address)s;

-- name: enrollment_active_for_lead
-- A lead's active enrolments, in one campaign (%(campaign_id)s) or in those a mailbox sends
-- (%(mailbox_id)s), or all (both NULL), with the campaign's inbound rules.
SELECT en.id, en.campaign_id, en.lead_id, en.mailbox_id, c.key AS campaign_key,
       c.stop_on_auto_reply, c.stop_on_domain_reply
FROM outreach.enrollments en
JOIN outreach.campaigns c ON c.id = en.campaign_id
WHERE en.lead_id = %(lead_id)s AND en.status = 'active'
  AND (%(campaign_id)s::bigint IS NULL OR en.campaign_id = %(campaign_id)s::bigint)
  AND (%(mailbox_id)s::bigint IS NULL OR en.mailbox_id = %(mailbox_id)s::bigint)
ORDER BY en.id;

-- name: campaign_inbound_rules
SELECT id, key, stop_on_auto_reply, stop_on_domain_reply
FROM outreach.campaigns WHERE id = %(campaign_id)s;

-- name: enrollment_active_same_domain
-- Every other active enrolment of a campaign whose lead has an address at %(domain)s
-- (stop_on_domain_reply: a colleague answered).
SELECT en.id, en.lead_id, l.email
FROM outreach.enrollments en
JOIN outreach.leads l ON l.id = en.lead_id
WHERE en.campaign_id = %(campaign_id)s AND en.status = 'active' AND en.lead_id <> %(lead_id)s
  AND split_part(l.email, '@', 2) = %(domain)s
ORDER BY en.id;

-- name: inbound_count_by_class
-- What the reader recorded, per class (tests and the report).
SELECT class, count(*)::integer AS n FROM outreach.inbound_messages GROUP BY class ORDER BY class;


-- name: email_sent_sample
-- The first %(n)s campaign emails sent (the demo answers, bounces and unsubscribes these).
SELECT e.id, l.email, s.message_id, m.address AS mailbox_address
FROM outreach.send_log s
JOIN outreach.emails e ON e.id = s.email_id
JOIN outreach.leads l ON l.id = e.lead_id
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE e.message_class = 'marketing'
ORDER BY e.id
LIMIT %(n)s;

-- name: inbound_effect_list
-- Every inbound message recorded, oldest first, with the lead it concerned (the demo's report).
SELECT im.id, im.class, im.evidence, im.effect, im.account,
       coalesce(l.email, im.address, im.from_address) AS address
FROM outreach.inbound_messages im
LEFT JOIN outreach.leads l ON l.id = im.lead_id
ORDER BY im.id;
