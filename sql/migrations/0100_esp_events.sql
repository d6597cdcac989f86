-- 0100: ESP event webhooks (issue 23, item 6): every event an ESP told us of, once.
-- outreach.esp_events is the record and the idempotency key: UNIQUE (provider, event_id,
-- recipient), so the same event delivered twice (providers retry until they see a 2xx) inserts
-- nothing the second time and its effect is not applied again (outreach.esp.apply_event).
-- outreach.esp_tokens holds the Mailgun signature tokens already used: a captured request
-- replayed within the replay window is refused.

CREATE TABLE outreach.esp_events (
    id          bigserial PRIMARY KEY,
    provider    text NOT NULL CHECK (provider IN ('ses', 'sendgrid', 'mailgun', 'postmark')),
    event_id    text NOT NULL,     -- the provider's id (SNS MessageId, sg_event_id, event-data.id …)
    recipient   text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('bounce', 'complaint', 'unsubscribe', 'delivered',
                                              'delayed', 'other')),
    message_id  text,              -- our Message-ID when the provider echoed it
    email_id    bigint REFERENCES outreach.emails (id),
    status      text,              -- RFC 3463 enhanced status
    diagnostic  text,
    reason      text,              -- outreach.reasons.REASONS
    owner       text CHECK (owner IN ('address', 'sender', 'transient', 'none')),
    effect      text NOT NULL DEFAULT 'none',
    occurred_at timestamptz,
    received_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_esp_events_event_key UNIQUE (provider, event_id, recipient)
);
CREATE INDEX outreach_esp_events_email_idx ON outreach.esp_events (email_id);

CREATE TABLE outreach.esp_tokens (
    provider text NOT NULL,
    token    text NOT NULL,
    used_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_esp_tokens_pkey PRIMARY KEY (provider, token)
);
