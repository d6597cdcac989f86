-- Webhooks out (outreach.webhooks, migration 0130): endpoints subscribe to event kinds; one
-- delivery row per (endpoint, event), posted until a 2xx. Every change of a claimed delivery is
-- guarded by its claim token, so a run whose claim was taken over changes nothing. "Now" can be
-- passed in (%(now)s) so the backoff is tested with a fixed clock.

-- name: webhook_endpoint_add
-- A new endpoint; its boundary (the column default) is the xmin of this transaction's snapshot:
-- it gets the events of transactions that had not ended when it was added, and every later one.
INSERT INTO outreach.webhook_endpoints (name, url, event_kinds, secret_ref, enabled)
VALUES (%(name)s, %(url)s, %(event_kinds)s, %(secret_ref)s, %(enabled)s)
RETURNING id;

-- name: webhook_endpoint_list
-- Every endpoint with its deliveries counted by status (no secret: only where it is read).
SELECT ep.id, ep.name, ep.url, ep.event_kinds, ep.secret_ref, ep.enabled,
       count(d.id) FILTER (WHERE d.status = 'pending') AS pending,
       count(d.id) FILTER (WHERE d.status = 'delivered') AS delivered,
       count(d.id) FILTER (WHERE d.status = 'dead') AS dead
FROM outreach.webhook_endpoints ep
LEFT JOIN outreach.webhook_deliveries d ON d.endpoint_id = ep.id
GROUP BY ep.id
ORDER BY ep.name;

-- name: webhook_enqueue
-- New events become deliveries, per enabled endpoint, incrementally by transaction boundary
-- (migration 0104): the events with boundary <= xact < the xmin of this statement's snapshot,
-- then boundary := that xmin. Every transaction below xmin has ended, so each of those events is
-- visible now and none can appear below the new boundary later: no gap. The endpoint rows are
-- locked (FOR UPDATE): a second run at once waits, then sees the moved boundary (READ COMMITTED
-- re-reads a locked row) and takes only what is above it; UNIQUE (endpoint, event) with
-- ON CONFLICT DO NOTHING makes any overlap harmless: no double.
WITH snap AS (
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin
), ep AS (
    SELECT e.id, e.boundary, e.event_kinds
    FROM outreach.webhook_endpoints e
    WHERE e.enabled AND e.boundary < (SELECT xmin FROM snap)
    ORDER BY e.id
    FOR UPDATE OF e
), queued AS (
    INSERT INTO outreach.webhook_deliveries (endpoint_id, event_id, next_attempt_at)
    SELECT ep.id, ev.id, coalesce(%(now)s, now())
    FROM ep
    JOIN outreach.events ev
      ON ev.xact >= ep.boundary AND ev.xact < (SELECT xmin FROM snap)
     AND (ev.kind = ANY (ep.event_kinds) OR '*' = ANY (ep.event_kinds))
    ORDER BY ep.id, ev.id
    ON CONFLICT ON CONSTRAINT outreach_webhook_deliveries_endpoint_event_key DO NOTHING
    RETURNING endpoint_id
), moved AS (
    UPDATE outreach.webhook_endpoints e
    SET boundary = (SELECT xmin FROM snap)
    FROM ep
    WHERE e.id = ep.id AND e.boundary < (SELECT xmin FROM snap)
    RETURNING e.id
)
SELECT (SELECT count(*) FROM queued) AS queued, (SELECT count(*) FROM moved) AS endpoints;

-- name: webhook_claim
-- Up to %(batch)s due pending deliveries of enabled endpoints, for one run: the attempt is
-- counted, the claim token stamped and next_attempt_at moved %(lease_seconds)s ahead, all in the
-- claim's own transaction, before anything is posted. SKIP LOCKED: two runs at once take
-- different rows; a row another run claimed and committed meanwhile is no longer due when this
-- one re-reads it, so it is not taken twice.
WITH due AS (
    SELECT d.id
    FROM outreach.webhook_deliveries d
    JOIN outreach.webhook_endpoints ep ON ep.id = d.endpoint_id AND ep.enabled
    WHERE d.status = 'pending' AND d.next_attempt_at <= coalesce(%(now)s, now())
    ORDER BY d.next_attempt_at, d.id
    LIMIT %(batch)s
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE outreach.webhook_deliveries d
SET attempts = d.attempts + 1, claim_token = %(token)s,
    next_attempt_at = coalesce(%(now)s, now()) + make_interval(secs => %(lease_seconds)s)
FROM due, outreach.webhook_endpoints ep, outreach.events ev
WHERE d.id = due.id AND ep.id = d.endpoint_id AND ev.id = d.event_id
RETURNING d.id, d.attempts, ep.name AS endpoint, ep.url, ep.secret_ref, ev.id AS event_id,
          ev.kind, ev.occurred_at, ev.campaign_id, ev.lead_id, ev.email_id, ev.payload;

-- name: webhook_touch
-- Right before its post: the claim still holds (same token, still pending) and its lease starts
-- again. No row: another run took the delivery over after the lease ran out; do not post.
UPDATE outreach.webhook_deliveries
SET next_attempt_at = coalesce(%(now)s, now()) + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'pending'
RETURNING id;

-- name: webhook_deliver_ok
-- A 2xx: delivered, guarded by the claim token (a run whose claim was taken over changes nothing).
UPDATE outreach.webhook_deliveries
SET status = 'delivered', delivered_at = coalesce(%(now)s, now()), last_status = %(http_status)s,
    last_error = NULL, claim_token = NULL
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'pending'
RETURNING id;

-- name: webhook_fail
-- Not a 2xx, or no answer: pending again after base × 2^(attempts - 1) seconds, at most cap
-- seconds; dead once attempts reached %(max_attempts)s. Guarded by the claim token.
UPDATE outreach.webhook_deliveries
SET status = CASE WHEN attempts >= %(max_attempts)s THEN 'dead' ELSE 'pending' END,
    next_attempt_at = coalesce(%(now)s, now()) + make_interval(secs => least(
        %(cap_seconds)s::float8,
        %(base_seconds)s::float8 * power(2::float8, least(attempts - 1, 40)))),
    last_status = %(http_status)s, last_error = %(error)s, claim_token = NULL
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'pending'
RETURNING id, status, attempts, next_attempt_at;

-- name: webhook_replay
-- Send again, now: the dead deliveries (%(dead_only)s), or every delivered or dead one of events
-- from %(since_event)s on, adding the events of that range an endpoint never had a delivery for
-- (before it was added). Of the endpoint %(endpoint)s (a name), or of all. Attempts start again
-- from 0. Pending rows are left alone: they are due or in flight already.
WITH ep AS (
    SELECT id, event_kinds FROM outreach.webhook_endpoints
    WHERE %(endpoint)s::text IS NULL OR name = %(endpoint)s::text
), added AS (
    INSERT INTO outreach.webhook_deliveries (endpoint_id, event_id, next_attempt_at)
    SELECT ep.id, ev.id, coalesce(%(now)s, now())
    FROM ep
    JOIN outreach.events ev
      ON ev.id >= %(since_event)s::bigint
     AND (ev.kind = ANY (ep.event_kinds) OR '*' = ANY (ep.event_kinds))
    WHERE NOT %(dead_only)s
    ORDER BY ep.id, ev.id
    ON CONFLICT ON CONSTRAINT outreach_webhook_deliveries_endpoint_event_key DO NOTHING
    RETURNING id
), reset AS (
    UPDATE outreach.webhook_deliveries d
    SET status = 'pending', attempts = 0, next_attempt_at = coalesce(%(now)s, now()),
        claim_token = NULL
    FROM ep
    WHERE d.endpoint_id = ep.id
      AND d.status IN ('dead', CASE WHEN %(dead_only)s THEN 'dead' ELSE 'delivered' END)
      AND (%(since_event)s::bigint IS NULL OR d.event_id >= %(since_event)s::bigint)
    RETURNING d.id
)
SELECT (SELECT count(*) FROM added) AS added, (SELECT count(*) FROM reset) AS reset;
