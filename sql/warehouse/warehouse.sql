-- The warehouse side of the export (outreach.export.SqlTarget), run through an Airflow SQL
-- connection (common-sql DbApiHook), not against the outreach database. Placeholders are %s and
-- positional; the target replaces them with its hook's placeholder (? for SQLite). Written for
-- PostgreSQL; INSERT … ON CONFLICT is also SQLite's and DuckDB's. Tables are created when
-- missing; an operator may create them first (other types, partitions, grants).

-- name: warehouse_events_create
-- One row per event, by its id: the id is the de-duplication key (a batch written twice, by a
-- killed run and its retry, inserts each event once). payload is the event's JSON text.
CREATE TABLE IF NOT EXISTS outreach_events (
    event_id    bigint PRIMARY KEY,
    kind        text NOT NULL,
    occurred_at timestamptz NOT NULL,
    campaign_id bigint,
    lead_id     bigint,
    email_id    bigint,
    payload     text NOT NULL
);

-- name: warehouse_email_timeline_create
-- The per-email read model: one row per email that has events, with the first time of each kind.
CREATE TABLE IF NOT EXISTS outreach_email_timeline (
    email_id        bigint PRIMARY KEY,
    campaign_id     bigint,
    lead_id         bigint,
    sent_at         timestamptz,
    replied_at      timestamptz,
    auto_replied_at timestamptz,
    bounced_at      timestamptz,
    unconfirmed_at  timestamptz,
    resolved_at     timestamptz,
    first_event_id  bigint NOT NULL
);

-- name: warehouse_event_insert
-- An event already there (the retry of a batch) is left as it is.
INSERT INTO outreach_events (event_id, kind, occurred_at, campaign_id, lead_id, email_id, payload)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (event_id) DO NOTHING;

-- name: warehouse_email_timeline_upsert
-- Each time column keeps the earliest value it was ever given, so applying a batch twice, or
-- batches in any order, gives the same row (the row is a function of the events, not of runs).
INSERT INTO outreach_email_timeline AS t (email_id, campaign_id, lead_id, sent_at, replied_at,
    auto_replied_at, bounced_at, unconfirmed_at, resolved_at, first_event_id)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (email_id) DO UPDATE SET
    campaign_id = coalesce(t.campaign_id, excluded.campaign_id),
    lead_id = coalesce(t.lead_id, excluded.lead_id),
    sent_at = CASE WHEN t.sent_at IS NULL OR excluded.sent_at < t.sent_at
                   THEN coalesce(excluded.sent_at, t.sent_at) ELSE t.sent_at END,
    replied_at = CASE WHEN t.replied_at IS NULL OR excluded.replied_at < t.replied_at
                      THEN coalesce(excluded.replied_at, t.replied_at) ELSE t.replied_at END,
    auto_replied_at = CASE WHEN t.auto_replied_at IS NULL
                                OR excluded.auto_replied_at < t.auto_replied_at
                           THEN coalesce(excluded.auto_replied_at, t.auto_replied_at)
                           ELSE t.auto_replied_at END,
    bounced_at = CASE WHEN t.bounced_at IS NULL OR excluded.bounced_at < t.bounced_at
                      THEN coalesce(excluded.bounced_at, t.bounced_at) ELSE t.bounced_at END,
    unconfirmed_at = CASE WHEN t.unconfirmed_at IS NULL OR excluded.unconfirmed_at < t.unconfirmed_at
                          THEN coalesce(excluded.unconfirmed_at, t.unconfirmed_at)
                          ELSE t.unconfirmed_at END,
    resolved_at = CASE WHEN t.resolved_at IS NULL OR excluded.resolved_at < t.resolved_at
                       THEN coalesce(excluded.resolved_at, t.resolved_at) ELSE t.resolved_at END,
    first_event_id = CASE WHEN excluded.first_event_id < t.first_event_id
                          THEN excluded.first_event_id ELSE t.first_event_id END;
