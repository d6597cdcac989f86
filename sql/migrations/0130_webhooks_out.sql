-- 0130: signed webhooks out (issue 26, item 4; outreach.webhooks). Each endpoint subscribes to
-- event kinds of outreach.events (0104); each (endpoint, event) is one delivery row, posted with
-- the Standard Webhooks headers until a 2xx, with backoff, and dead after N attempts.
--
-- The secret is not in the database: secret_ref names where the worker reads it, the password of
-- an Airflow connection ('conn:<id>') or an environment variable ('env:<NAME>'), a whsec_ value.
--
-- boundary is the endpoint's watermark, a transaction boundary as 0104 explains: the enqueue
-- (named query webhook_enqueue) takes the events with boundary <= xact <
-- pg_snapshot_xmin(pg_current_snapshot()) and moves boundary to that xmin, in one statement that
-- locks the endpoint row, so two runs at once neither skip nor double an event (UNIQUE below,
-- ON CONFLICT DO NOTHING). A new endpoint starts at the xmin of its creation: it gets what
-- happens from then on (outreach webhooks replay --since-event sends older events). A disabled
-- endpoint keeps its boundary and catches up when enabled again.
CREATE TABLE outreach.webhook_endpoints (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL,
    url         text NOT NULL,
    event_kinds text[] NOT NULL,
    secret_ref  text NOT NULL,
    enabled     boolean NOT NULL DEFAULT true,
    boundary    xid8 NOT NULL DEFAULT pg_snapshot_xmin(pg_current_snapshot()),
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_webhook_endpoints_name_key UNIQUE (name),
    CONSTRAINT outreach_webhook_endpoints_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    CONSTRAINT outreach_webhook_endpoints_url_check CHECK (url ~ '^https?://[^\s/]+\S*$'),
    -- '*' is every kind; NULL items are refused (array_to_string would skip them).
    CONSTRAINT outreach_webhook_endpoints_kinds_check CHECK (
        cardinality(event_kinds) > 0 AND array_position(event_kinds, NULL) IS NULL
        AND array_to_string(event_kinds, ',') ~ '^(\*|[a-z][a-z_]*)(,(\*|[a-z][a-z_]*))*$'),
    CONSTRAINT outreach_webhook_endpoints_secret_check CHECK (
        secret_ref ~ '^(conn:[A-Za-z0-9_.-]+|env:[A-Za-z_][A-Za-z0-9_]*)$')
);

-- One row per endpoint and event: UNIQUE (endpoint_id, event_id) is what makes an enqueue run
-- twice (or two at once) deliver an event to an endpoint once. status:
--   pending   — to post at next_attempt_at: inserted by webhook_enqueue, set again by
--               webhook_fail below N attempts and by webhook_replay; a claim (webhook_claim,
--               SKIP LOCKED) counts the attempt, stamps claim_token and moves next_attempt_at
--               past the post's lease, so another run does not take it meanwhile;
--   delivered — a 2xx answered (webhook_deliver_ok, guarded by the claim token);
--   dead      — the N-th attempt failed (webhook_fail); only webhook_replay sends it again.
CREATE TABLE outreach.webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     bigint NOT NULL REFERENCES outreach.webhook_endpoints (id) ON DELETE CASCADE,
    event_id        bigint NOT NULL REFERENCES outreach.events (id) ON DELETE CASCADE,
    status          text NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    claim_token     uuid,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_webhook_deliveries_endpoint_event_key UNIQUE (endpoint_id, event_id),
    CONSTRAINT outreach_webhook_deliveries_status_check
        CHECK (status IN ('pending', 'delivered', 'dead')),
    CONSTRAINT outreach_webhook_deliveries_attempts_check CHECK (attempts >= 0)
);

-- The claim reads the due pending rows; the enqueue reads events by transaction.
CREATE INDEX outreach_webhook_deliveries_due_idx
    ON outreach.webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outreach_events_xact_idx ON outreach.events (xact);
