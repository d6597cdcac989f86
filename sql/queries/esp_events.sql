-- name: esp_event_insert
-- Record one ESP event; nothing (no row) when it was recorded before: the caller then applies
-- no effect (the same event delivered twice applies once).
INSERT INTO outreach.esp_events (provider, event_id, recipient, kind, message_id, email_id,
                                 status, diagnostic, reason, owner, occurred_at)
VALUES (%(provider)s, %(event_id)s, %(recipient)s, %(kind)s, %(message_id)s, %(email_id)s,
        %(status)s, %(diagnostic)s, %(reason)s, %(owner)s, %(occurred_at)s)
ON CONFLICT ON CONSTRAINT outreach_esp_events_event_key DO NOTHING
RETURNING id;

-- name: esp_event_set_effect
-- What applying the event did, in words for people.
UPDATE outreach.esp_events SET effect = %(effect)s WHERE id = %(id)s;

-- name: esp_event_token_use
-- Mark a signature token used; no row when it was used before (a replayed request).
INSERT INTO outreach.esp_tokens (provider, token) VALUES (%(provider)s, %(token)s)
ON CONFLICT ON CONSTRAINT outreach_esp_tokens_pkey DO NOTHING
RETURNING token;
