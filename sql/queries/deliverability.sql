-- Deliverability: what the DNS preflight checks before a send run.

-- name: mailbox_preflight_targets
-- Active mailboxes with their DKIM settings: the preflight checks each sending domain once per
-- selector. Paused mailboxes send nothing, so they are not checked.
SELECT id, address, split_part(address, '@', 2) AS domain, dkim_selector, dkim_key_conn_id
FROM outreach.mailboxes
WHERE status = 'active'
ORDER BY id;
