-- 0104: the event log (issue 26, item 1): one append-only row per effect outreach records (sent,
-- replied, bounced, complained, unsubscribed, stopped, paused, unconfirmed, resolved, …), written
-- in the same transaction as the effect (an outbox). Consumers (warehouse export, webhooks out,
-- Assets) read it by id as a watermark.
--
-- An identity id is not commit-ordered: a transaction that took id 10 may commit after one that
-- took id 11, so "id > watermark" alone could skip 10 for good. Each row therefore carries the
-- id of the transaction that wrote it (xact); a consumer reads only rows whose xact is older than
-- every transaction still running (xact < pg_snapshot_xmin(pg_current_snapshot())), so nothing
-- below its new watermark can still appear.
--
-- No addresses or names in payload: it names rows by id (lead, email, campaign); the consumer
-- joins and masks what leaves the database.
CREATE TABLE outreach.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    xact        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    campaign_id bigint REFERENCES outreach.campaigns (id),
    lead_id     bigint REFERENCES outreach.leads (id),
    email_id    bigint REFERENCES outreach.emails (id),
    payload     jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT outreach_events_kind_check CHECK (kind ~ '^[a-z][a-z_]*$')
);

CREATE INDEX outreach_events_email_idx ON outreach.events (email_id);
CREATE INDEX outreach_events_lead_idx ON outreach.events (lead_id);
