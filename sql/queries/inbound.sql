-- Inbound messages (outreach.inbox): the table's rules are in migration 0011. Each message is one
-- transaction: match it (emails.sql: email_by_message_ids, email_latest_sent_to; leads.sql:
-- lead_by_address), record it (inbound_insert, which decides who applies the effect), apply the
-- effect, set the effect text, advance the cursor.

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
                                       address, dsn_status, received_at, reason, diagnostic)
VALUES (%(account)s, %(folder)s, %(uidvalidity)s, %(uid)s, %(mailbox_id)s, %(message_id)s,
        %(from_address)s, %(subject)s, %(class)s, %(evidence)s, %(email_id)s, %(lead_id)s,
        %(address)s, %(dsn_status)s, %(received_at)s, %(reason)s, %(diagnostic)s)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: inbound_set_effect
UPDATE outreach.inbound_messages SET effect = %(effect)s WHERE id = %(id)s RETURNING id;

-- name: inbound_effect_list
-- Every inbound message recorded, oldest first, with the lead it concerned (the demo's report).
SELECT im.id, im.class, im.evidence, im.effect, im.account,
       coalesce(l.email, im.address, im.from_address) AS address
FROM outreach.inbound_messages im
LEFT JOIN outreach.leads l ON l.id = im.lead_id
ORDER BY im.id;

-- name: inbound_reply_notices
-- What a reply notice says about each reply event (outreach.notify), in event order: the lead's
-- address, the campaign, the step replied to, the mailbox, the message's subject and where it
-- lies (account, folder, UIDVALIDITY, UID) so its first lines are read from the mailbox: the
-- text itself is never stored. A lead, email or campaign erased meanwhile gives NULLs.
SELECT ev.id AS event_id, l.email AS lead, c.key AS campaign, st.position AS step,
       m.label AS mailbox_label, m.display_name AS mailbox_display_name, m.address AS mailbox_address,
       im.subject, im.account, im.folder, im.uidvalidity, im.uid
FROM outreach.events ev
LEFT JOIN outreach.inbound_messages im ON im.id = (ev.payload->>'inbound_id')::bigint
LEFT JOIN outreach.leads l ON l.id = ev.lead_id
LEFT JOIN outreach.campaigns c ON c.id = ev.campaign_id
LEFT JOIN outreach.emails e ON e.id = ev.email_id
LEFT JOIN outreach.sequence_steps st ON st.id = e.step_id
LEFT JOIN outreach.mailboxes m ON m.id = im.mailbox_id
WHERE ev.id = ANY(%(event_ids)s) AND ev.kind = 'replied'
ORDER BY ev.id;
