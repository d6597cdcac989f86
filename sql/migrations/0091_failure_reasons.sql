-- 0091: one reason for every delivery failure, and effects by its owner (issue 23).
-- Every failure -- an SMTP reply in our own session, a DSN read from an inbox, later an ESP event
-- -- gets a reason from outreach.reasons (sisimai's vocabulary) and that reason's owner: the
-- address is gone, the sender (we) was refused, or transient. The reason, status and diagnostic
-- are kept on the email and the inbound row; each failure is one row of
-- outreach.delivery_failures, which is what the rules count (docs/explanation/
-- bounces-and-complaints.md).

ALTER TABLE outreach.emails
    ADD COLUMN failure_reason     text,   -- outreach.reasons key of the last failure (SMTP or DSN)
    ADD COLUMN failure_status     text,   -- its RFC 3463 status ('5.7.26'), when one was given
    ADD COLUMN failure_diagnostic text;   -- the server's words (<= 500 characters)

-- 'sender_refused': a permanent SMTP reply whose reason is the sender's (DMARC, a blocklist,
-- policy ...): never the lead's fault, and requeueable once fixed (nothing was accepted).
ALTER TABLE outreach.emails DROP CONSTRAINT outreach_emails_failure_kind_check;
ALTER TABLE outreach.emails ADD CONSTRAINT outreach_emails_failure_kind_check CHECK (
    (status = 'failed') = (failure_kind IS NOT NULL)
    AND failure_kind IN ('permanent', 'retries_exhausted', 'unconfirmed', 'render', 'operator',
                         'sender_refused'));
ALTER TABLE outreach.email_requeues DROP CONSTRAINT outreach_email_requeues_kind_check;
ALTER TABLE outreach.email_requeues ADD CONSTRAINT outreach_email_requeues_kind_check
    CHECK (failure_kind IN ('retries_exhausted', 'sender_refused'));

ALTER TABLE outreach.inbound_messages
    ADD COLUMN reason     text,   -- outreach.reasons key (bounces, blocks, reports, complaints)
    ADD COLUMN diagnostic text;   -- the report's Diagnostic-Code or the bounce's text (<= 500)
ALTER TABLE outreach.inbound_messages DROP CONSTRAINT outreach_inbound_messages_class_check;
ALTER TABLE outreach.inbound_messages ADD CONSTRAINT outreach_inbound_messages_class_check
    CHECK (class IN ('hard_bounce', 'soft_bounce', 'sender_block', 'delivery_report', 'complaint',
                     'unsubscribe', 'auto_reply', 'reply', 'unmatched'));

-- One row per delivery failure of one recipient, whatever reported it: the effect is applied
-- only by whoever inserted the row (ON CONFLICT DO NOTHING RETURNING), so a report read twice,
-- two reports of one failure, or an SMTP failure and a DSN about the same email apply once.
CREATE TABLE outreach.delivery_failures (
    id          bigserial PRIMARY KEY,
    -- Who reported it: 'smtp:<email id>:<claim token>', 'inbound:<inbound id>',
    -- 'esp:<provider>:<event id>'.
    source      text NOT NULL,
    email_id    bigint REFERENCES outreach.emails (id),
    mailbox_id  bigint REFERENCES outreach.mailboxes (id),
    address     text NOT NULL,            -- the failed recipient, normal form
    reason      text NOT NULL,            -- outreach.reasons key
    owner       text NOT NULL,
    status      text,                     -- RFC 3463
    diagnostic  text,
    occurred_at timestamptz NOT NULL,     -- when it was reported (the soft-bounce rule's day)
    CONSTRAINT outreach_delivery_failures_source_key UNIQUE (source),
    CONSTRAINT outreach_delivery_failures_owner_check
        CHECK (owner IN ('address', 'sender', 'transient'))
);
-- One failure per email and recipient after the handoff: a second report of it (another DSN,
-- the same bounce forwarded, an ESP event after the DSN) is not a second bounce. Our own SMTP
-- session reports once per claim ('smtp:<email id>:<claim token>'): a requeued email refused
-- again is a second block. Per owner: a temporary failure reported first never hides a later
-- report that the address is gone.
CREATE UNIQUE INDEX outreach_delivery_failures_email_key
    ON outreach.delivery_failures (email_id, address, owner)
    WHERE email_id IS NOT NULL AND source NOT LIKE 'smtp:%';
-- The soft-bounce rule reads an address's failures; the block rule a mailbox's.
CREATE INDEX outreach_delivery_failures_address_idx
    ON outreach.delivery_failures (address, occurred_at);
CREATE INDEX outreach_delivery_failures_mailbox_idx
    ON outreach.delivery_failures (mailbox_id, occurred_at) WHERE owner = 'sender';
