-- 0104: the event log (issue 26, item 1): one append-only row per effect outreach records (sent,
-- replied, bounced, complained, unsubscribed, stopped, paused, unconfirmed, resolved, …), written
-- in the same transaction as the effect (an outbox). Consumers (warehouse export, webhooks out,
-- Assets) read it by id as a watermark.
--
-- An identity id is not commit-ordered: a transaction that took id 10 may commit after one that
-- took id 11, so "id > watermark" alone could skip 10 for good. Nor is xact: a transaction gets
-- its id at its first write, which may come long before it inserts its event. Each row therefore
-- carries the id of the transaction that wrote it (xact), and a consumer's watermark is a
-- transaction boundary, not an event id: it reads the rows with previous boundary <= xact <
-- pg_snapshot_xmin(pg_current_snapshot()) and keeps that xmin as its next boundary. Every
-- transaction below xmin has ended, so no row can still appear below the boundary. The id
-- names one event (for de-duplication), in order within a read.
-- The event outlives the rows it names: a deleted email, lead or campaign (erasure, a clean-up)
-- leaves its events with the id set to NULL, never blocks the delete.
--
-- No addresses or names in payload: it names rows by id (lead, email, campaign); the consumer
-- joins and masks what leaves the database.
CREATE TABLE outreach.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    xact        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    campaign_id bigint REFERENCES outreach.campaigns (id) ON DELETE SET NULL,
    lead_id     bigint REFERENCES outreach.leads (id) ON DELETE SET NULL,
    email_id    bigint REFERENCES outreach.emails (id) ON DELETE SET NULL,
    payload     jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT outreach_events_kind_check CHECK (kind ~ '^[a-z][a-z_]*$')
);

CREATE INDEX outreach_events_email_idx ON outreach.events (email_id);
CREATE INDEX outreach_events_lead_idx ON outreach.events (lead_id);
