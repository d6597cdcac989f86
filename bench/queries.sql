-- Benchmark-only statements: the raw baselines outreach is compared with, and the set-up they
-- need. Loaded with outreach.db.parse_queries, like sql/queries/*.sql; never run by outreach.

-- name: bench_database_drop
DROP DATABASE IF EXISTS {name} WITH (FORCE);

-- name: bench_database_create
CREATE DATABASE {name};

-- name: bench_database_clone
CREATE DATABASE {name} TEMPLATE {template};

-- name: bench_server_version
SELECT current_setting('server_version') AS version;

-- name: bench_prepare_mailboxes
-- The claim and send benches send everything today: lift every mailbox's cap and warm-up, and
-- give each a DKIM selector so that the send path signs (the key comes from the bench).
UPDATE outreach.mailboxes
SET daily_cap = 100000, warmup_start = NULL, dkim_selector = %(selector)s::text,
    dkim_key_conn_id = CASE WHEN %(selector)s::text IS NOT NULL THEN 'bench_dkim' END;

-- name: bench_sent_totals
-- How many rows ended sent, how many ledger entries, and how many email ids have more than one.
SELECT (SELECT count(*) FROM outreach.emails WHERE status = 'sent')::integer AS sent,
       (SELECT count(*) FROM outreach.send_log)::integer AS ledger,
       (SELECT count(*) FROM (SELECT email_id FROM outreach.send_log GROUP BY email_id
                              HAVING count(*) > 1) d)::integer AS duplicated;

-- name: bench_queued_count
SELECT count(*)::integer AS n FROM outreach.emails WHERE status = 'queued';

-- name: bench_bare_create
-- Baseline (a) of the claim path: a bare job table, the usual shape of a PostgreSQL queue.
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE bench.jobs (
    id          bigserial PRIMARY KEY,
    status      text NOT NULL DEFAULT 'queued',
    claim_token uuid,
    sent_at     timestamptz
);
CREATE INDEX bench_jobs_queued_idx ON bench.jobs (id) WHERE status = 'queued';

-- name: bench_bare_fill
INSERT INTO bench.jobs (status) SELECT 'queued' FROM generate_series(1, %(n)s);

-- name: bench_bare_claim
-- The bare claim: UPDATE … FOR UPDATE SKIP LOCKED … RETURNING.
UPDATE bench.jobs SET status = 'sending', claim_token = %(claim_token)s
WHERE id IN (SELECT id FROM bench.jobs WHERE status = 'queued' ORDER BY id
             LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: bench_bare_mark
-- The bare per-row mark, guarded by the claim token like outreach's.
UPDATE bench.jobs SET status = 'sent', sent_at = now()
WHERE id = %(id)s AND status = 'sending' AND claim_token = %(claim_token)s
RETURNING id;

-- name: bench_bare_totals
SELECT count(*) FILTER (WHERE status = 'sent')::integer AS sent, 0 AS ledger, 0 AS duplicated
FROM bench.jobs;

-- name: bench_copy_create
-- Baseline of the import: the CSV's columns (bench/data.py HEADER) as text, no constraint,
-- no index.
CREATE TABLE bench_copy_leads (first_name text, last_name text, email text, company text,
                               title text, timezone text, phone text, lifecycle_stage text,
                               lead_status text);

-- name: bench_copy_csv
COPY bench_copy_leads FROM STDIN WITH (FORMAT csv, HEADER true);

-- name: bench_bare_queue_create
-- Baseline of queue-due: a bare table with the emails' columns, no constraint, index or trigger.
CREATE TABLE bench_bare_emails (lead_id bigint, step_id bigint, campaign_id bigint,
                                mailbox_id bigint, scheduled_for timestamptz);

-- name: bench_bare_queue_insert
-- The same join as email_queue_due, without the suppression function, the send-window slot,
-- the existence check and ON CONFLICT: what a bare INSERT … SELECT costs.
INSERT INTO bench_bare_emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for)
SELECT en.lead_id, st.id, c.id, en.mailbox_id, now()
FROM outreach.enrollments en
JOIN outreach.campaigns c ON c.id = en.campaign_id
JOIN outreach.leads l ON l.id = en.lead_id
JOIN outreach.sequence_steps st ON st.campaign_id = c.id
LEFT JOIN outreach.sequence_steps prev
       ON prev.campaign_id = c.id AND prev.position = st.position - 1
LEFT JOIN outreach.emails pe ON pe.lead_id = en.lead_id AND pe.step_id = prev.id
WHERE en.status = 'active' AND c.status = 'active'
  AND (st.position = 1 OR pe.status = 'sent')
  AND CASE WHEN st.position = 1 THEN en.enrolled_at ELSE pe.sent_at END
      + st.delay_days * interval '1 day' <= now();

-- name: bench_vacuum_analyze
-- After building a template: fresh statistics and visibility map, as a settled database has.
VACUUM ANALYZE;

-- name: bench_backend_waits
-- What each other backend of this database is doing now (common.Sampler): its state and wait.
SELECT state, wait_event_type, wait_event
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend';

-- name: bench_jit_on
-- The campaign page's baseline: its report queries with the server's JIT on (as before
-- report_jit_off).
SET jit = on;

-- name: bench_claim_calendar_and_mx
-- The claim bench's policy is every policy on: give the campaign a holiday country and a blackout
-- date (neither today, so nothing is held, but the claim looks both up), fill the holidays of DE
-- for the year around today, and cache an MX provider for most bench domains (google, microsoft,
-- yahoo in turn; a few left out stay 'other'), as outreach.mxproviders would.
UPDATE outreach.campaigns
SET country = 'DE', blackout_dates = ARRAY[(now() + interval '200 days')::date];
INSERT INTO outreach.holidays (country, day, name)
SELECT 'DE', d::date, 'bench holiday'
FROM generate_series(now() + interval '2 days', now() + interval '300 days', interval '30 days') d
ON CONFLICT DO NOTHING;
INSERT INTO outreach.mx_providers (domain, provider, expires_at, checked_at)
SELECT 'bench' || i || '.example', (ARRAY['google', 'microsoft', 'yahoo'])[1 + i % 3],
       now() + interval '1 day', now()
FROM generate_series(0, 89) i
ON CONFLICT (domain) DO NOTHING;
