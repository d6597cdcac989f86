-- Logins of a mailbox (outreach mailbox check: outreach.logincheck).

-- name: mailbox_connections
-- A mailbox's Airflow connections, by id (%(mailbox_id)s) or address (case-insensitive).
SELECT id, address, smtp_conn_id, imap_conn_id
FROM outreach.mailboxes
WHERE id = %(mailbox_id)s::bigint OR address = lower(%(address)s::text);
