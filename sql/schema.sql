-- sql/schema.sql — the outreach database as the migrations leave it: the current truth, in one
-- file to read. It is not how a database is built: `outreach db upgrade` (plugins/outreach/
-- migrate.py) applies sql/migrations/NNNN_*.sql, forward-only history that is never edited.
-- tests/migration/test_schema_truth.py builds one database from every migration and one
-- from this file and asserts that `pg_dump --schema-only` of both is identical, so this file cannot
-- drift: a migration that changes the schema changes this file in the same commit.
--
-- Where each rule lives (one hop; search for the name):
--   the claim ........... outreach.claim_emails_v4 (v1 without the contact policy; v3: the
--                         same without provider caps, for the previous release)  §4 "The claim"
--                         (called by the named queries email_claim_batch, email_claim_transactional)
--   the suppression rule  outreach.is_suppressed                    §4 "Suppression"
--   erasure ............. outreach.erase_person_v1 (a keyed hash in suppressions)  §4 "Erasure"
--   the warm-up rule .... outreach.mailbox_daily_limit              §4 "Warm-up"
--   the pacing rule ..... named queries mailbox_remaining_today (a run's share of the day, the
--                         daily limit) and mailbox_reserve_handoffs (the gap) in sql/queries/,
--                         on outreach.send_window_span and mailboxes.next_handoff_at  §4 "Pacing"
--   what the cap counts . outreach.mailbox_claim_counts, kept by triggers
--                         outreach_emails_count_claims_*                           §2, §5
--   the contact policy (person and company caps) outreach.claim_emails_v4: counts of the
--                         lead's and the organisation's sending/sent rows under
--                         pg_try_advisory_xact_lock on 'outreach.person:<lead id>' and
--                         'outreach.org:<domain>'; organisations: outreach.org_domains  §4
--   the provider cap .... outreach.claim_emails_v4 (p_provider_hourly): the mailbox's rows of
--                         the last hour per recipient provider (emails.provider, stamped at the
--                         claim from outreach.email_provider: cached MX in outreach.mx_providers;
--                         read by outreach_emails_mailbox_claimed_idx), under the caller's
--                         mailbox lock  §4
--   the send window ..... outreach.next_send_slot                   §4 "Send windows"
--   the calendar ........ holidays: outreach.holidays (filled by outreach.calendars), read by
--                         outreach.next_open_slot (email_queue_due) and the `cal` join of
--                         outreach.claim_emails_v3; business days: outreach.add_working_days;
--                         blackout dates: campaigns.blackout_dates; freeze: mailboxes.freeze_*  §4
--   one email per lead and step  outreach_emails_lead_step_key      §2 outreach.emails
--   one send-log entry per email outreach_send_log_email_key        §2 outreach.send_log
--   the Message-ID never changes trigger outreach_emails_keep_idempotency_key  §5
--   a row's A/B variant is fixed trigger outreach_emails_keep_variant          §5
--   unconfirmed needs a person   trigger outreach_emails_guard_unconfirmed     §5
--   transactional enqueue ....   outreach.enqueue_transactional     §4 "Transactional mail"
--   stopping an enrolment .....  outreach.stop_enrollment           §4 "Enrolments"
--   one webhook per endpoint and event  outreach_webhook_deliveries_endpoint_event_key  §2
-- Every change of a row that a sender claimed is a guarded UPDATE (status = 'sending' AND
-- claim_token = the sender's token), written in sql/queries/; each status value below names the
-- query or function that sets it.
--
-- Stored functions that callers depend on by signature carry a version in their name
-- (claim_emails_v1). A changed signature or return type is a new version created by a new
-- migration (claim_emails_v2) while the old one stays, the named queries move to it, and a later
-- migration drops the old version: a worker still running the previous release keeps working
-- during a rollout. A fix that keeps the signature is CREATE OR REPLACE of the same version.
--
-- Sections: 1 schema and types · 2 tables with their constraints · 3 indexes · 4 functions ·
-- 5 triggers · 6 grants (none: the application connects as the role that owns the database and
-- runs the migrations, deploy/postgres-init.sh).
-- UNIQUE and CHECK constraints carry explicit names: errors name them (outreach.db.run raises
-- OutreachDBError with .constraint); primary and foreign keys have PostgreSQL's default names.
-- The migrations bookkeeping (outreach_schema.migrations) belongs to migrate.py, not here.

-- =============================================================================================
-- 1. Schema and types
-- =============================================================================================

CREATE SCHEMA outreach;

-- The life of an email row. Final: sent, failed, suppressed, cancelled.
CREATE TYPE outreach.email_status AS ENUM (
    -- queued → waiting for scheduled_for; any sender may claim it. Set at insert
    --   (email_queue_due; outreach.enqueue_transactional), and back to it by email_mark_retry (a
    --   retryable reply), email_reap_stale (a stale claim that never reached the server),
    --   email_release_claimed (a sender giving back rows it never handed over),
    --   email_resolve_not_sent and email_requeue_failed (an operator).
    'queued',
    -- sending → claimed by exactly one sender (claim_token); the SMTP handoff may be under way.
    --   Set only by outreach.claim_emails_v1.
    'sending',
    -- sent → the SMTP server accepted it (2xx to the end of DATA); send_log has its one entry,
    --   written by the same statement: email_mark_sent, or email_resolve_was_sent (an operator
    --   who saw it in Sent Items).
    'sent',
    -- failed → final; failure_kind says why. email_mark_failed ('permanent': 5xx, 'render': the
    --   template failed, 'unconfirmed': DATA sent and no reply came), email_mark_retry
    --   ('retries_exhausted'), email_reap_stale ('unconfirmed': a stale claim that had reached
    --   the server). 'unconfirmed' needs a person (check Sent Items): only an operator
    --   resolution changes it (trigger outreach_emails_guard_unconfirmed).
    'failed',
    -- suppressed → final; the address is suppressed (outreach.is_suppressed): at insert
    --   (outreach.enqueue_transactional), before the handoff (email_mark_suppressed), or when a
    --   suppression arrives for queued rows (email_cancel_suppressed).
    'suppressed',
    -- cancelled → final; the enrolment stopped (an operator, a reply) before the step went out:
    --   outreach.stop_enrollment, or email_cancel_stopped before the handoff.
    'cancelled'
);

-- =============================================================================================
-- 2. Tables with their constraints
-- =============================================================================================

-- ---------------------------------------------------------------------------------------------
-- Mailboxes, campaigns, sequence steps
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.mailboxes (
    id               bigserial PRIMARY KEY,
    address          text NOT NULL,
    display_name     text NOT NULL DEFAULT '',
    smtp_conn_id     text NOT NULL,            -- Airflow connection id: secrets never live here
    timezone         text NOT NULL DEFAULT 'UTC',  -- the mailbox's day: caps count per local day
    -- The warm-up rule's inputs (outreach.mailbox_daily_limit, §4 "Warm-up").
    daily_cap        integer NOT NULL DEFAULT 50,
    warmup_start     date,                     -- NULL: no warm-up ramp (an established mailbox)
    warmup_initial   integer NOT NULL DEFAULT 10,
    warmup_days      integer NOT NULL DEFAULT 7,
    warmup_increment integer NOT NULL DEFAULT 5,
    -- active → sends. paused → claims nothing (the claim reads it under the mailbox lock:
    --   mailbox_lock); set by mailbox_pause (an operator, or automatically: actor 'postmaster' or
    --   'bounce-rate'), back to active by mailbox_resume; each change writes its
    --   outreach.mailbox_events row in the same statement. The first pause's reason is kept.
    status           text NOT NULL DEFAULT 'active',
    paused_reason    text,
    paused_at        timestamptz,
    paused_by        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    dkim_selector    text,                     -- DKIM: the key stays in the Airflow connection
    dkim_key_conn_id text,
    transactional    boolean NOT NULL DEFAULT false,  -- sends transactional mail (at most one)
    -- The pacing gap: the earliest moment the next claimed row may be handed to the SMTP server,
    -- moved forward one jittered gap per claimed row (mailbox_reserve_handoffs, under the mailbox
    -- lock). NULL: never claimed since 0010 (no wait).
    next_handoff_at  timestamptz,
    imap_conn_id     text,                     -- the mailbox's own IMAP account
    unsubscribe_imap_conn_id text,             -- the account receiving mailto:unsubscribe@…
    label            text NOT NULL DEFAULT '', -- the name operators know it by (logs, UI)
    -- A freeze (the mailbox file's `freeze:`, 0137): on these local dates (both included) the
    -- claim (outreach.claim_emails_v3) takes nothing of the mailbox.
    freeze_from      date,
    freeze_to        date,
    -- The mailbox's own provider (the mailbox file's `provider:`, 0145), for a campaign's
    -- provider_match; NULL: its domain's MX provider (outreach.email_provider).
    provider         text,
    CONSTRAINT outreach_mailboxes_address_key UNIQUE (address),
    CONSTRAINT outreach_mailboxes_status_check CHECK (status IN ('active', 'paused')),
    CONSTRAINT outreach_mailboxes_cap_check CHECK (daily_cap > 0 AND warmup_initial > 0
        AND warmup_days >= 0 AND warmup_increment >= 0),
    CONSTRAINT outreach_mailboxes_dkim_check CHECK ((dkim_selector IS NULL) = (dkim_key_conn_id IS NULL)),
    CONSTRAINT outreach_mailboxes_label_check CHECK (length(label) <= 80 AND label !~ '[[:cntrl:]]'),
    CONSTRAINT outreach_mailboxes_freeze_check
        CHECK ((freeze_from IS NULL) = (freeze_to IS NULL) AND freeze_from <= freeze_to),
    CONSTRAINT outreach_mailboxes_provider_check
        CHECK (provider IN ('google', 'microsoft', 'yahoo', 'apple', 'other'))
);
COMMENT ON COLUMN outreach.mailboxes.provider IS
    'the mailbox''s own provider as configured; NULL: its domain''s MX provider (outreach.mx_providers)';

CREATE TABLE outreach.campaigns (
    id           bigserial PRIMARY KEY,
    key          text NOT NULL,               -- stable slug from the campaign file
    name         text NOT NULL,
    timezone     text NOT NULL,
    send_days    integer[] NOT NULL,          -- ISO weekdays, 1 = Monday … 7 = Sunday
    window_start time NOT NULL,
    window_end   time NOT NULL,               -- exclusive; '24:00' means end of day
    source_file  text NOT NULL,
    -- draft → a new campaign (the default; the file may say `status: active`, campaign_upsert):
    --   previewable, test-sendable, nothing queued (email_queue_due) or claimed
    --   (outreach.claim_emails_v1 reads c.status = 'active').
    -- awaiting_approval → submitted (campaign_submit), or an active/paused campaign whose
    --   content_version changed (trigger outreach_campaigns_content_changed); as draft.
    --   Approved → active (campaign_approve, approved_by/approved_at/approved_content_version),
    --   rejected → draft (campaign_reject).
    -- active → queues and sends. paused → queues nothing (email_queue_due) and its queued rows
    --   are not claimed (outreach.claim_emails_v1 reads c.status); they go out after a resume.
    --   Set by campaign_pause, back to active by campaign_resume.
    -- finished → every enrolment is done and nothing is in flight (campaign_finish:
    --   outreach.finish_campaigns_v1, run by queue-due); final. Takes no new enrolment (trigger
    --   outreach_enrollments_refuse_finished; the import reports each such line).
    -- Each change writes its outreach.campaign_events row in the same statement; trigger
    -- outreach_campaigns_check_status refuses any other transition (§5).
    status       text NOT NULL DEFAULT 'draft',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    stop_on_auto_reply   boolean NOT NULL DEFAULT false,  -- an out-of-office stops the enrolment
    stop_on_domain_reply boolean NOT NULL DEFAULT false,  -- a reply stops the company's leads
    paused_reason text,
    paused_at     timestamptz,
    paused_by     text,
    approved_at   timestamptz,
    approved_by   text,
    -- The content as last synced (outreach.content.campaign_content_version: the steps' content
    -- versions, delays and `requires`) and the one a person approved (campaign_approve). Another
    -- version synced for an active or paused campaign sends it back to awaiting_approval
    -- (trigger outreach_campaigns_content_changed): a second approval. NULL approved version
    -- (created active, or approved before 0127): the first version synced is taken as approved.
    content_version          text,
    approved_content_version text,
    -- The campaign file declares a `source:` (campaign_upsert): it may be fed new leads at any
    -- time, so it never finishes by itself (outreach.finish_campaigns_v1).
    fed_by_source boolean NOT NULL DEFAULT false,
    -- A person already in another campaign's sequence (the contact policy): allow, wait
    -- (email_queue_due) or skip (enrollment_insert_staged); outreach.lead_in_other_sequence.
    overlap       text NOT NULL DEFAULT 'allow',
    -- The calendar (0137): delay_days in working days (email_queue_due,
    -- outreach.add_working_days); the holiday country of leads without their own `country`
    -- (outreach.lead_country); dates the campaign sends nothing (outreach.next_open_slot and
    -- the claim).
    business_days  boolean NOT NULL DEFAULT false,
    country        text,
    blackout_dates date[] NOT NULL DEFAULT '{}',
    -- Enrolment gives a lead a mailbox of its own mailbox provider while one is open and within
    -- its share (enrollment_insert_staged, 0145); false: round robin by lead id.
    provider_match boolean NOT NULL DEFAULT false,
    CONSTRAINT outreach_campaigns_key_key UNIQUE (key),
    CONSTRAINT outreach_campaigns_status_check
        CHECK (status IN ('draft', 'awaiting_approval', 'active', 'paused', 'finished')),
    CONSTRAINT outreach_campaigns_window_check CHECK (window_start < window_end),
    CONSTRAINT outreach_campaigns_overlap_check CHECK (overlap IN ('allow', 'wait', 'skip')),
    CONSTRAINT outreach_campaigns_country_check CHECK (country ~ '^[A-Z]{2}$')
);
COMMENT ON COLUMN outreach.campaigns.overlap IS
    'a person already in another sequence: allow, wait (step 1 after the other is done) or skip';
COMMENT ON COLUMN outreach.campaigns.business_days IS
    'delay_days count working days (Mon-Fri, no holiday of the lead''s country)';
COMMENT ON COLUMN outreach.campaigns.provider_match IS
    'enrolment prefers a mailbox of the lead''s mailbox provider (enrollment_insert_staged)';

CREATE TABLE outreach.campaign_mailboxes (
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    CONSTRAINT outreach_campaign_mailboxes_pkey PRIMARY KEY (campaign_id, mailbox_id)
);

CREATE TABLE outreach.sequence_steps (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    position    integer NOT NULL,             -- 1 = first email
    template    text NOT NULL,                -- include/templates/<template>.txt.j2 and .html.j2
    subject     text NOT NULL,                -- a Jinja2 template string
    delay_days  integer NOT NULL,             -- days after the previous step was sent
    thread      boolean NOT NULL DEFAULT false,  -- sent as a reply in the first step's thread
    requires    text[] NOT NULL DEFAULT '{}', -- lead fields it needs (outreach.lead_missing_fields)
    CONSTRAINT outreach_sequence_steps_position_key UNIQUE (campaign_id, position),
    CONSTRAINT outreach_sequence_steps_position_check CHECK (position >= 1),
    CONSTRAINT outreach_sequence_steps_delay_check CHECK (delay_days >= 0),
    CONSTRAINT outreach_sequence_steps_thread_check CHECK (NOT (thread AND position = 1)),
    CONSTRAINT outreach_sequence_steps_requires_check
        CHECK (requires <@ ARRAY['first_name', 'last_name', 'company', 'title']::text[])
);
COMMENT ON COLUMN outreach.sequence_steps.requires IS
    'lead fields this step needs (non-blank); a lead lacking one is not queued for the step';

-- A/B variants of a step (0126): own subject and/or template (NULL: the step's) and a weight.
-- outreach.step_variant_for chooses one per (lead, step) when the row is queued; emails.variant
-- keeps it. A variant dropped from the campaign file is retired (active = false), never deleted:
-- rows queued with it still render with its content.
CREATE TABLE outreach.step_variants (
    step_id  bigint NOT NULL REFERENCES outreach.sequence_steps (id),
    name     text NOT NULL,
    position integer NOT NULL,                -- order in the campaign file (1 = first)
    subject  text,                            -- a Jinja2 string; NULL: the step's subject
    template text,                            -- include/templates/<template>.*; NULL: the step's
    weight   integer NOT NULL,                -- share of new rows: weight / sum of active weights
    active   boolean NOT NULL DEFAULT true,   -- false: in no campaign file any more, never chosen
    CONSTRAINT outreach_step_variants_pkey PRIMARY KEY (step_id, name),
    CONSTRAINT outreach_step_variants_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_\-]{0,39}$'),
    CONSTRAINT outreach_step_variants_weight_check CHECK (weight > 0)
);

-- ---------------------------------------------------------------------------------------------
-- Leads and enrolments
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.leads (
    id         bigserial PRIMARY KEY,
    email      text NOT NULL,                 -- normal form: outreach.normalize_address
    first_name text NOT NULL DEFAULT '',
    last_name  text NOT NULL DEFAULT '',
    company    text NOT NULL DEFAULT '',
    title      text NOT NULL DEFAULT '',
    timezone   text,                          -- NULL: the campaign's time zone applies
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- The lead file's other columns as a JSON object of text values ({{ lead.custom.city }});
    -- size caps are checked by the import (outreach.leads), this CHECK is the backstop.
    custom     jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT outreach_leads_email_key UNIQUE (email),
    CONSTRAINT outreach_leads_custom_check
        CHECK (jsonb_typeof(custom) = 'object' AND length(custom::text) <= 65536)
);

CREATE TABLE outreach.enrollments (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    lead_id     bigint NOT NULL REFERENCES outreach.leads (id),
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    -- active → its steps are queued (email_queue_due). Set at insert (enrollment_insert_staged).
    -- stopped → final for the campaign: an operator, or a SQL source's stop_when_missing.
    -- replied → final: the inbox reader read a reply (an auto-reply too with stop_on_auto_reply).
    --   Both set only by outreach.stop_enrollment, which cancels the queued steps with it.
    status      text NOT NULL DEFAULT 'active',
    enrolled_at timestamptz NOT NULL DEFAULT now(),
    stopped_at  timestamptz,
    stopped_by  text,
    stop_reason text,
    CONSTRAINT outreach_enrollments_campaign_lead_key UNIQUE (campaign_id, lead_id),
    CONSTRAINT outreach_enrollments_status_check CHECK (status IN ('active', 'stopped', 'replied'))
);
-- Who and why for every stop. NOT VALID: enrolments stopped by hand before migration 0012 have
-- no who/why; every new stop has them.
ALTER TABLE outreach.enrollments
    ADD CONSTRAINT outreach_enrollments_stop_check CHECK (
        CASE WHEN status = 'active'
             THEN stopped_at IS NULL AND stopped_by IS NULL AND stop_reason IS NULL
             ELSE stopped_at IS NOT NULL AND btrim(coalesce(stopped_by, '')) <> ''
                  AND btrim(coalesce(stop_reason, '')) <> ''
        END) NOT VALID;

-- The organisational domain of an email domain (the Public Suffix List's registrable domain,
-- computed in Python by outreach.orgdomains, which fills this table before rows are queued), or
-- free_mail: the domain is a mailbox provider's, so its users are no company. A domain missing
-- from the table is its own organisation (never a lookup inside the claim).
CREATE TABLE outreach.org_domains (
    domain text PRIMARY KEY CHECK (domain = lower(domain) AND domain <> ''),
    org text CHECK (org = lower(org) AND org <> ''),
    free_mail boolean NOT NULL DEFAULT false,
    CHECK (free_mail OR org IS NOT NULL)
);
COMMENT ON TABLE outreach.org_domains IS
    'email domain → organisational domain (Public Suffix List) or free mail; filled by outreach.orgdomains';
-- Rows: the free-mail providers (migration 0132), then what outreach.orgdomains maps.

-- The mailbox provider of an email domain from its MX records (migration 0141), until the
-- records' TTL ends; filled by outreach.mxproviders (outreach_queue_due), read by the claim.
CREATE TABLE outreach.mx_providers (
    domain text PRIMARY KEY,
    provider text NOT NULL,
    expires_at timestamptz NOT NULL,
    checked_at timestamptz NOT NULL,
    CONSTRAINT mx_providers_domain_check CHECK (domain = lower(domain) AND domain <> ''),
    CONSTRAINT mx_providers_provider_check
        CHECK (provider IN ('google', 'microsoft', 'yahoo', 'apple', 'other'))
);
COMMENT ON TABLE outreach.mx_providers IS
    'email domain → mailbox provider from its MX records, until the records expire; filled by outreach.mxproviders';

-- The public holidays of a country (ISO 3166-1 alpha-2), national ones only (no subdivision),
-- from the `holidays` Python package: filled by outreach.calendar.fill before every queueing for
-- the countries of leads (custom column `country`) and campaigns (`country:`), for the years in
-- outreach.holiday_years. Read by the queue and the claim, never computed there.
CREATE TABLE outreach.holidays (
    country text NOT NULL,
    day     date NOT NULL,
    name    text NOT NULL,
    PRIMARY KEY (country, day),
    CONSTRAINT outreach_holidays_country_check CHECK (country ~ '^[A-Z]{2}$')
);
COMMENT ON TABLE outreach.holidays IS
    'public holidays per ISO country (the holidays package); filled by outreach.calendar.fill';

-- Which (country, year) outreach.calendar.fill has filled (a country the package does not know
-- is marked too, with no holiday: it is not asked again every run).
CREATE TABLE outreach.holiday_years (
    country   text NOT NULL,
    year      integer NOT NULL,
    known     boolean NOT NULL,
    filled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (country, year),
    CONSTRAINT outreach_holiday_years_check CHECK (country ~ '^[A-Z]{2}$' AND year BETWEEN 1970 AND 2200)
);

-- The domain part of a stored (normalised) address (outreach.org_of).
CREATE FUNCTION outreach.email_domain(p_email text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT lower(split_part(p_email, '@', 2)) $$;

-- ---------------------------------------------------------------------------------------------
-- Suppressions (the rule: outreach.is_suppressed, §4) and their history
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.suppressions (
    id         bigserial PRIMARY KEY,
    -- 'address', 'domain', or 'address_hmac': an erased person (0129), kept only as the keyed
    -- hash outreach.erased_address_hash of the address.
    kind       text NOT NULL,
    value      text NOT NULL,                 -- normal-form address, lower-case domain, or hash
    -- unsubscribed, complained: marketing opt-outs (transactional mail ignores them);
    -- bounced, manual, do-not-contact, erased: every message class honours them.
    reason     text NOT NULL,
    source     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_suppressions_value_key UNIQUE (kind, value),
    CONSTRAINT outreach_suppressions_kind_check
        CHECK (kind IN ('address', 'domain', 'address_hmac')),
    CONSTRAINT outreach_suppressions_reason_check CHECK (reason IN
        ('unsubscribed', 'bounced', 'complained', 'manual', 'do-not-contact', 'erased'))
);

-- One row per suppress / unsuppress, written by trigger outreach_suppressions_record_event (§5),
-- so no change is missed whoever makes it. actor and note come from the settings outreach.actor
-- and outreach.note of the transaction; an unsuppress needs both.
CREATE TABLE outreach.suppression_events (
    id             bigserial PRIMARY KEY,
    action         text NOT NULL,             -- 'suppress' or 'unsuppress'
    suppression_id bigint NOT NULL,           -- no FK: the suppression is gone after unsuppress
    kind           text NOT NULL,
    value          text NOT NULL,
    reason         text NOT NULL,
    source         text NOT NULL,
    actor          text,
    note           text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_suppression_events_action_check CHECK (action IN ('suppress', 'unsuppress')),
    CONSTRAINT outreach_suppression_events_kind_check
        CHECK (kind IN ('address', 'domain', 'address_hmac')),
    CONSTRAINT outreach_suppression_events_unsuppress_check CHECK (action <> 'unsuppress'
        OR (btrim(coalesce(actor, '')) <> '' AND btrim(coalesce(note, '')) <> ''))
);

-- Erasure (0129; the work: outreach.erase_person_v1, §4 "Erasure")
-- The fingerprint of the erasure key (one row at most): HMAC-SHA256 of a fixed text under the
-- key, hex. Written by the first erasure; it tells a missing or wrong key from the right one.
CREATE TABLE outreach.erasure_keys (
    id          integer PRIMARY KEY DEFAULT 1,
    fingerprint text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_erasure_keys_one_check CHECK (id = 1)
);

-- One row per erasure run (outreach lead erase, the outreach_lead_erase DAG): who, when, why and
-- how many rows of each table it changed. Never the address or a name: lead_id is the tombstone.
CREATE TABLE outreach.erasures (
    id        bigserial PRIMARY KEY,
    erased_at timestamptz NOT NULL DEFAULT now(),
    actor     text NOT NULL,
    reason    text NOT NULL,
    lead_id   bigint REFERENCES outreach.leads (id),  -- NULL: no lead had the address
    counts    jsonb NOT NULL,                           -- {"leads": 1, "emails": 2, ...}
    CONSTRAINT outreach_erasures_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_erasures_reason_check CHECK (btrim(reason) <> ''),
    CONSTRAINT outreach_erasures_counts_check CHECK (jsonb_typeof(counts) = 'object')
);

-- ---------------------------------------------------------------------------------------------
-- Emails: one row per (lead, sequence step), or per transactional delivery key
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.emails (
    id              bigserial PRIMARY KEY,
    lead_id         bigint REFERENCES outreach.leads (id),            -- marketing only
    step_id         bigint REFERENCES outreach.sequence_steps (id),   -- marketing only
    campaign_id     bigint REFERENCES outreach.campaigns (id),        -- marketing only
    mailbox_id      bigint NOT NULL REFERENCES outreach.mailboxes (id),
    status          outreach.email_status NOT NULL DEFAULT 'queued',  -- transitions: §1
    -- Fixed at insert, never changed (trigger outreach_emails_keep_idempotency_key): it becomes
    -- the Message-ID, so every attempt of this row carries the same Message-ID.
    idempotency_key uuid NOT NULL DEFAULT gen_random_uuid(),
    scheduled_for   timestamptz NOT NULL,     -- UTC; not claimed before this
    attempts        integer NOT NULL DEFAULT 0,  -- + 1 per claim
    -- A random token per claim: a timestamp is not a lock identity. Every transition of a claimed
    -- row requires status = 'sending' AND this token, so a sender whose claim was taken away (the
    -- reaper, an operator) can never overwrite the outcome.
    claim_token     uuid,
    claimed_at      timestamptz,
    claimed_by      text,
    -- Set exactly with status 'failed': 'permanent', 'render', 'unconfirmed' (email_mark_failed,
    -- email_reap_stale), 'retries_exhausted' (email_mark_retry); 'operator' is allowed by the
    -- CHECK and set by no query today.
    failure_kind    text,
    last_error      text,                     -- stage, reply code and text of the last problem
    sent_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- 'marketing' (a lead's campaign step) or 'transactional' (outreach.enqueue_transactional).
    message_class   text NOT NULL DEFAULT 'marketing',
    delivery_key    text,                     -- the application's key (transactional only)
    recipient       text,                     -- the To address (transactional only)
    template        text,                     -- include/templates/<template>.* (transactional)
    context         jsonb,                    -- the template's variables (transactional only)
    -- The handoff stamp: committed by a guarded UPDATE (email_touch_claim) right before MAIL FROM
    -- of this row. A 'sending' row without it never reached the server (the reaper requeues
    -- it); with it, it may have gone out (the reaper fails it as unconfirmed).
    handed_over_at  timestamptz,
    -- Evidence of a late acceptance (2xx after the row was failed as unconfirmed under the same
    -- claim token): email_record_late_accept. Never changes the status: a person decides.
    late_accepted_at       timestamptz,
    late_accept_reply      text,
    late_accept_message_id text,
    -- The last delivery failure (0091, issue 23): at SMTP time or by a DSN read later.
    failure_reason     text,   -- outreach.reasons key ('authfailure', 'userunknown' ...)
    failure_status     text,   -- its RFC 3463 status ('5.7.26'), when one was given
    failure_diagnostic text,   -- the server's words (<= 500 characters)
    -- The claim's heartbeat (email_heartbeat_claim), refreshed every few seconds by the live
    -- sender on its rows not yet handed over: an unstamped row whose claim and heartbeat are both
    -- older than the release threshold lost its sender, and the reaper requeues it (0098).
    claim_heartbeat_at     timestamptz,
    -- Why the claim held this queued row back and moved its scheduled_for (the contact policy,
    -- outreach.claim_emails_v2, 0111): 'frequency cap: 1 a day'. Cleared when it is claimed.
    hold_reason            text,
    -- The step variant this row renders (0126): chosen when queued (outreach.step_variant_for),
    -- never changed (trigger outreach_emails_keep_variant). NULL: the step has no variants.
    variant                text,
    -- The organisation the row was claimed for (outreach.org_of, by claim_emails_v3, 0140): the
    -- per-company count reads the day's contacts by it. NULL: free mail, or never claimed so.
    org                    text,
    -- The recipient mailbox provider the row was claimed for (outreach.email_provider, by
    -- claim_emails_v4, 0144): the provider cap counts the mailbox's hour by it.
    provider               text,
    CONSTRAINT outreach_emails_lead_step_key UNIQUE (lead_id, step_id),
    CONSTRAINT outreach_emails_variant_fkey
        FOREIGN KEY (step_id, variant) REFERENCES outreach.step_variants (step_id, name),
    CONSTRAINT outreach_emails_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT outreach_emails_attempts_check CHECK (attempts >= 0),
    CONSTRAINT outreach_emails_failure_kind_check CHECK (
        (status = 'failed') = (failure_kind IS NOT NULL)
        AND failure_kind IN ('permanent', 'retries_exhausted', 'unconfirmed', 'render', 'operator',
                             'sender_refused')
    ),
    CONSTRAINT outreach_emails_claim_check CHECK (
        status <> 'sending' OR (claim_token IS NOT NULL AND claimed_at IS NOT NULL)
    ),
    CONSTRAINT outreach_emails_message_class_check
        CHECK (message_class IN ('marketing', 'transactional')),
    -- A marketing row is exactly one (lead, step) of a campaign; a transactional row is exactly
    -- one delivery key with its recipient, template and context, and no lead, step or campaign.
    CONSTRAINT outreach_emails_class_shape_check CHECK (
        CASE message_class
            WHEN 'marketing' THEN lead_id IS NOT NULL AND step_id IS NOT NULL
                                  AND campaign_id IS NOT NULL AND delivery_key IS NULL
                                  AND recipient IS NULL AND template IS NULL AND context IS NULL
            ELSE lead_id IS NULL AND step_id IS NULL AND campaign_id IS NULL
                 AND delivery_key IS NOT NULL AND length(delivery_key) BETWEEN 1 AND 200
                 AND recipient IS NOT NULL AND template ~ '^[a-z0-9][a-z0-9_]{0,62}$'
                 AND jsonb_typeof(context) = 'object'
        END),
    -- A transactional Message-ID comes from its delivery key.
    CONSTRAINT outreach_emails_delivery_key_message_id_check CHECK (
        delivery_key IS NULL
        OR idempotency_key = md5('outreach-transactional:' || delivery_key)::uuid),
    -- Every path back to the queue clears the handoff stamp.
    CONSTRAINT outreach_emails_queued_not_handed_over_check
        CHECK (status <> 'queued' OR handed_over_at IS NULL),
    CONSTRAINT outreach_emails_late_accept_check
        CHECK (late_accepted_at IS NULL OR (late_accept_reply IS NOT NULL
                                            AND late_accept_message_id IS NOT NULL))
);
COMMENT ON COLUMN outreach.emails.handed_over_at IS
    'committed right before MAIL FROM of the current attempt; NULL: never reached the SMTP server';
COMMENT ON COLUMN outreach.emails.late_accepted_at IS
    'the server accepted (2xx to the end of DATA) after the row was failed as unconfirmed';
COMMENT ON COLUMN outreach.emails.claim_heartbeat_at IS
    'last heartbeat of the live sender holding this claim (unstamped rows only); NULL: none yet';
COMMENT ON COLUMN outreach.emails.hold_reason IS
    'why the claim held this queued row back and moved scheduled_for (contact policy); NULL: not held';
COMMENT ON COLUMN outreach.emails.variant IS
    'the step variant this row renders (outreach.step_variants); fixed when queued; NULL: none';
COMMENT ON COLUMN outreach.emails.org IS
    'the organisation this row was claimed for (outreach.org_of; NULL: free mail or not claimed by claim_emails_v3)';
COMMENT ON COLUMN outreach.emails.provider IS
    'the recipient mailbox provider this row was claimed for (outreach.email_provider); NULL: not claimed by claim_emails_v4 since 0144';

-- Exactly one entry per email row, written only after the SMTP server accepted it, by the same
-- statement that marks the row sent (email_mark_sent; email_resolve_was_sent for an operator).
CREATE TABLE outreach.send_log (
    id          bigserial PRIMARY KEY,
    email_id    bigint NOT NULL REFERENCES outreach.emails (id),
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    message_id  text NOT NULL,
    smtp_reply  text NOT NULL,                -- the server's reply to the end of DATA
    source      text NOT NULL DEFAULT 'smtp', -- 'smtp', or 'operator' when a person confirmed it
    accepted_at timestamptz NOT NULL DEFAULT now(),
    subject     text,                         -- as sent (a threaded follow-up replies "Re: " it)
    -- which copy it was built from (outreach.content.content_version); NULL before 0103 and for
    -- an operator's confirmation
    content_version text,
    CONSTRAINT outreach_send_log_email_key UNIQUE (email_id),
    CONSTRAINT outreach_send_log_message_id_key UNIQUE (message_id),
    CONSTRAINT outreach_send_log_source_check CHECK (source IN ('smtp', 'operator'))
);

-- What each mailbox's daily cap counts, per UTC quarter-hour of claimed_at (every time zone's
-- midnight falls on one): how many of its rows claimed then are now sending or sent, or failed as
-- unconfirmed. mailbox_remaining_today sums the quarter-hours of the mailbox's day instead of
-- counting today's rows. Written only by the triggers outreach_emails_count_claims_* (§5), in
-- the transaction of every change of outreach.emails that changes the count (0081).
CREATE TABLE outreach.mailbox_claim_counts (
    mailbox_id bigint NOT NULL REFERENCES outreach.mailboxes (id) ON DELETE CASCADE,
    quarter    timestamptz NOT NULL,     -- outreach.claim_quarter(claimed_at)
    claimed    integer NOT NULL,
    PRIMARY KEY (mailbox_id, quarter),
    CONSTRAINT outreach_mailbox_claim_counts_claimed_check CHECK (claimed >= 0)
);

-- Test sends (outreach campaign test-send, outreach.testsend): a step rendered for a lead and
-- sent to a seed address by the real mailbox. Not in outreach.send_log (one entry per email
-- row); counted toward the mailbox's daily cap by trigger outreach_test_sends_count_claims (§5).
CREATE TABLE outreach.test_sends (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    step_id     bigint NOT NULL REFERENCES outreach.sequence_steps (id),
    lead_id     bigint NOT NULL REFERENCES outreach.leads (id),  -- whose data it was rendered with
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    recipient   text NOT NULL,                -- the seed address it went to
    message_id  text NOT NULL,
    smtp_reply  text NOT NULL,                -- the server's reply to the end of DATA
    actor       text NOT NULL,                -- who sent it (the OS user)
    accepted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_test_sends_message_id_key UNIQUE (message_id),
    CONSTRAINT outreach_test_sends_actor_check CHECK (btrim(actor) <> '')
);

-- Operator resolutions of unconfirmed rows (outreach resolve): was_sent → 'sent' with a send-log
-- entry, not_sent → 'queued' (email_resolve_was_sent, email_resolve_not_sent).
CREATE TABLE outreach.email_resolutions (
    id          bigserial PRIMARY KEY,
    email_id    bigint NOT NULL REFERENCES outreach.emails (id),
    decision    text NOT NULL,
    resolved_by text NOT NULL,
    note        text NOT NULL DEFAULT '',
    resolved_at timestamptz NOT NULL DEFAULT now(),
    evidence    text,                         -- the late acceptance the operator saw, if any
    CONSTRAINT outreach_email_resolutions_decision_check CHECK (decision IN ('was_sent', 'not_sent')),
    CONSTRAINT outreach_email_resolutions_by_check CHECK (length(btrim(resolved_by)) > 0)
);

-- Operator requeues of not-accepted failures (outreach requeue: email_requeue_failed). Only
-- 'retries_exhausted' and 'sender_refused': nothing was accepted, so a new attempt cannot send
-- twice.
CREATE TABLE outreach.email_requeues (
    id           bigserial PRIMARY KEY,
    email_id     bigint NOT NULL REFERENCES outreach.emails (id),
    failure_kind text NOT NULL,
    last_error   text,                          -- the failure it was requeued from
    attempts     integer NOT NULL,              -- attempts made before the requeue
    requeued_by  text NOT NULL,
    reason       text NOT NULL,
    requeued_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_email_requeues_kind_check
        CHECK (failure_kind IN ('retries_exhausted', 'sender_refused')),
    CONSTRAINT outreach_email_requeues_by_check CHECK (length(btrim(requeued_by)) > 0),
    CONSTRAINT outreach_email_requeues_reason_check CHECK (length(btrim(reason)) > 0)
);

-- ---------------------------------------------------------------------------------------------
-- Imports and lead sources
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.import_runs (
    id           bigserial PRIMARY KEY,
    kind         text NOT NULL,                -- 'leads' or 'suppressions'
    file         text NOT NULL,
    campaign_key text,
    rows_total   integer NOT NULL,
    imported     integer NOT NULL,             -- new leads (or new suppressions)
    updated      integer NOT NULL,
    duplicate    integer NOT NULL,
    invalid      integer NOT NULL,
    suppressed   integer NOT NULL,
    enrolled     integer NOT NULL,
    problems     jsonb NOT NULL DEFAULT '[]',  -- [{"line": 12, "field": "email", "reason": "…"}]
    created_at   timestamptz NOT NULL DEFAULT now(),
    unchanged    integer NOT NULL DEFAULT 0,
    problems_omitted integer NOT NULL DEFAULT 0,
    problems_purged_at timestamptz,  -- retention emptied problems (0125); counts kept
    CONSTRAINT outreach_import_runs_kind_check CHECK (kind IN ('leads', 'suppressions'))
);
COMMENT ON COLUMN outreach.import_runs.duplicate IS 'rows repeating an earlier row of the same file';
COMMENT ON COLUMN outreach.import_runs.unchanged IS 'rows whose lead was already known, unchanged';
COMMENT ON COLUMN outreach.import_runs.problems_omitted IS
    'problems not stored in problems (only the first 100,000 by line are)';

-- A file source imports each object once: (source, path, version) is claimed with INSERT … ON
-- CONFLICT DO NOTHING in the import's own transaction. version: the ETag, else mtime and size.
CREATE TABLE outreach.source_objects (
    id            bigserial PRIMARY KEY,
    campaign_key  text NOT NULL,
    source        text NOT NULL,                -- the campaign's source path pattern
    path          text NOT NULL,                -- the object's full path (URI)
    version       text NOT NULL,
    import_run_id bigint REFERENCES outreach.import_runs (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_source_objects_key UNIQUE (source, path, version)
);

-- A SQL source's rows by stable identity: the lead a row became and the run that last saw it
-- (stop_when_missing stops the enrolments of leads a later run no longer saw).
CREATE TABLE outreach.source_rows (
    campaign_id  bigint NOT NULL REFERENCES outreach.campaigns (id),
    row_key      text NOT NULL,
    lead_id      bigint NOT NULL REFERENCES outreach.leads (id),
    last_run_id  bigint NOT NULL REFERENCES outreach.import_runs (id),
    CONSTRAINT outreach_source_rows_key PRIMARY KEY (campaign_id, row_key)
);

-- ---------------------------------------------------------------------------------------------
-- Pause / resume history, deliverability figures, alerts
-- ---------------------------------------------------------------------------------------------

-- One row per change of outreach.mailboxes.status, written by the same statement as the change
-- (mailbox_pause, mailbox_resume), so the history cannot miss one.
CREATE TABLE outreach.mailbox_events (
    id         bigserial PRIMARY KEY,
    mailbox_id bigint NOT NULL REFERENCES outreach.mailboxes (id),
    event      text NOT NULL,   -- 'paused' or 'resumed'
    actor      text NOT NULL,   -- the operator; 'postmaster' or 'bounce-rate' for automatic pauses
    reason     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_mailbox_events_event_check CHECK (event IN ('paused', 'resumed')),
    CONSTRAINT outreach_mailbox_events_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_mailbox_events_reason_check CHECK (btrim(reason) <> '')
);

-- The same for outreach.campaigns.status (campaign_pause, campaign_resume, campaign_submit,
-- campaign_approve, campaign_reject, campaign_finish).
CREATE TABLE outreach.campaign_events (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    event       text NOT NULL,   -- 'paused', 'resumed', 'submitted', 'approved', 'rejected', 'finished'
    actor       text NOT NULL,
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_campaign_events_event_check
        CHECK (event IN ('paused', 'resumed', 'submitted', 'approved', 'rejected', 'finished')),
    CONSTRAINT outreach_campaign_events_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_campaign_events_reason_check CHECK (btrim(reason) <> '')
);

-- Google Postmaster Tools figures, one row per domain, metric (and feedback-loop id) and day. A
-- day the API did not report is unknown (value NULL, has_data false), never 0.
CREATE TABLE outreach.postmaster_stats (
    domain           text NOT NULL,
    metric           text NOT NULL,
    feedback_loop_id text NOT NULL DEFAULT '',  -- '' for the domain-wide SPAM_RATE
    day              date NOT NULL,
    value            double precision,          -- a fraction: 0.001 = 0.1 %; NULL = no data
    has_data         boolean NOT NULL,
    fetched_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_postmaster_stats_pkey PRIMARY KEY (domain, metric, feedback_loop_id, day),
    CONSTRAINT outreach_postmaster_stats_metric_check CHECK (
        metric IN ('SPAM_RATE', 'FEEDBACK_LOOP_SPAM_RATE')
        AND (metric = 'FEEDBACK_LOOP_SPAM_RATE') = (feedback_loop_id <> '')),
    CONSTRAINT outreach_postmaster_stats_value_check CHECK (
        has_data = (value IS NOT NULL) AND (value IS NULL OR value BETWEEN 0 AND 1))
);

CREATE TABLE outreach.postmaster_compliance (
    domain     text NOT NULL,
    day        date NOT NULL,                -- the UTC day it was fetched
    needs_work text[] NOT NULL DEFAULT '{}', -- requirements not COMPLIANT
    status     jsonb NOT NULL,               -- the API's response, as returned
    fetched_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_postmaster_compliance_pkey PRIMARY KEY (domain, day)
);

-- One row per alert event; the UNIQUE event key makes an alert go out once: the sender is whoever's
-- INSERT … ON CONFLICT DO NOTHING RETURNING returns the row, committed after delivery.
CREATE TABLE outreach.alerts (
    id         bigserial PRIMARY KEY,
    event_key  text NOT NULL,   -- e.g. 'paused:42', 'unconfirmed:288', 'run-failed:outreach_send:<run id>'
    kind       text NOT NULL,
    subject    text NOT NULL,
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_alerts_event_key_key UNIQUE (event_key),
    CONSTRAINT outreach_alerts_kind_check CHECK (
        kind IN ('paused', 'unconfirmed', 'run_failed', 'preflight_fail', 'bounce_warning',
                 'required_action', 'login_failed'))
);

-- ---------------------------------------------------------------------------------------------
-- Inbound: every message read once (UNIQUE), its effect applied in the same transaction
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.inbound_messages (
    id           bigserial PRIMARY KEY,
    account      text NOT NULL,     -- the Airflow IMAP connection id the message was read from
    folder       text NOT NULL,
    uidvalidity  bigint NOT NULL,   -- RFC 3501 §2.3.1.1: a new UIDVALIDITY voids every UID
    uid          bigint NOT NULL,
    mailbox_id   bigint REFERENCES outreach.mailboxes (id),  -- NULL: a shared unsubscribe account
    message_id   text NOT NULL,     -- Message-ID without <>, or 'sha256:<hex>' when it has none
    from_address text NOT NULL DEFAULT '',
    subject      text NOT NULL DEFAULT '',
    class        text NOT NULL,
    evidence     text NOT NULL,     -- which header or part decided the class
    email_id     bigint REFERENCES outreach.emails (id),
    lead_id      bigint REFERENCES outreach.leads (id),
    address      text,
    dsn_status   text,
    effect       text NOT NULL DEFAULT 'none',
    received_at  timestamptz,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    reason       text,   -- outreach.reasons key (bounces, blocks, reports, complaints; 0091)
    diagnostic   text,   -- the report's Diagnostic-Code or the bounce's text (<= 500)
    content_purged_at timestamptz, -- retention blanked from/subject/address/diagnostic/evidence (0125)
    CONSTRAINT outreach_inbound_messages_uid_key UNIQUE (account, folder, uidvalidity, uid),
    CONSTRAINT outreach_inbound_messages_message_id_key UNIQUE (account, message_id),
    CONSTRAINT outreach_inbound_messages_class_check CHECK (class IN (
        'hard_bounce',  -- permanent failure (DSN 5.x.x): the address is suppressed 'bounced'
        'soft_bounce',  -- transient failure (mailbox full, 4.x.x): suppressed after repeats
        'sender_block', -- refused for something of ours (DMARC, blocklist): the mailbox counts it
        'delivery_report', -- a DSN saying delayed, relayed or delivered: no effect
        'complaint',    -- ARF feedback report (RFC 5965): suppressed 'complained'
        'unsubscribe',  -- mail to the List-Unsubscribe mailto, or "unsubscribe" as first line
        'auto_reply',   -- RFC 3834 and the common out-of-office forms: recorded only (by default)
        'reply',        -- a person answered one of our emails: the enrolment stops ('replied')
        'unmatched'))   -- anything else, or a reply we cannot tie to a lead: no effect
);

-- One row per delivery failure of one recipient, whatever reported it (0091, issue 23): the effect
-- is applied only by whoever inserted the row (ON CONFLICT DO NOTHING RETURNING), so a report
-- read twice, two reports of one failure, or an SMTP failure and a DSN about the same email
-- apply once. The rules count these rows (outreach.bounces).
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

-- How far the reader got per account, folder and UIDVALIDITY; advanced only upwards, in the same
-- transaction as each message's row. An optimisation: the UNIQUE constraints above keep a message
-- from counting twice.
CREATE TABLE outreach.inbound_cursors (
    account     text NOT NULL,
    folder      text NOT NULL,
    uidvalidity bigint NOT NULL,
    last_uid    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_inbound_cursors_pkey PRIMARY KEY (account, folder, uidvalidity)
);

-- ESP webhook events (outreach.esp, migration 0100): UNIQUE (provider, event_id, recipient) is
-- the idempotency key (a provider's retry applies nothing twice); esp_tokens: Mailgun tokens used.
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

CREATE TABLE outreach.esp_tokens (
    provider text NOT NULL,
    token    text NOT NULL,
    used_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_esp_tokens_pkey PRIMARY KEY (provider, token)
);

-- The event log (issue 26): append-only, one row per recorded effect, written in the effect's own
-- transaction (an outbox). A consumer's watermark is a transaction boundary: it reads rows with
-- previous boundary <= xact < pg_snapshot_xmin(pg_current_snapshot()) and keeps that xmin as the
-- next boundary (neither ids nor xacts are commit-ordered: migration 0104). The id names one
-- event. payload names rows by id, never an address or a name.
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

-- Webhooks out (outreach.webhooks, migration 0130): endpoints subscribe to event kinds; their
-- secret is named (secret_ref: 'conn:<Airflow connection>' or 'env:<VARIABLE>'), never stored.
-- boundary is the endpoint's watermark, a transaction boundary (0104): webhook_enqueue takes the
-- events with boundary <= xact < the snapshot's xmin and moves it there, in one statement that
-- locks the endpoint row. A new endpoint starts at the xmin of its creation.
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

-- The audit trail (0128, issue 27): one append-only row per operator decision, written by
-- outreach.audit.record in the decision's own transaction. actor: the Airflow user, or
-- 'os:<user>' for the CLI; via: cli, airflow, page or api (a direct library call). Never a full
-- address: target_key and details hold masked addresses, ids and counts. Append-only (trigger
-- outreach_audit_log_append_only, §5).
CREATE TABLE outreach.audit_log (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    via          text NOT NULL,
    action       text NOT NULL,
    target_kind  text NOT NULL,
    target_key   text,
    target_id    bigint,
    campaign_key text,
    reason       text,
    details      jsonb NOT NULL DEFAULT '{}'::jsonb,
    dag_id       text,
    run_id       text,
    CONSTRAINT outreach_audit_log_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_audit_log_via_check CHECK (via IN ('cli', 'airflow', 'page', 'api')),
    CONSTRAINT outreach_audit_log_action_check CHECK (action IN (
        'suppress', 'unsuppress', 'pause', 'resume', 'resolve', 'requeue', 'stop', 'submit',
        'approve', 'reject', 'erase', 'settings')),
    CONSTRAINT outreach_audit_log_target_kind_check CHECK (target_kind IN (
        'suppression', 'campaign', 'mailbox', 'email', 'enrollment', 'lead', 'settings'))
);

-- The warehouse export's position per target (outreach.export, migration 0131): done_* is the
-- last event, in (xact, id) order, the target durably has; planned_* the last of the batch being
-- written. Each moves by a guarded UPDATE; a killed run rewrites the planned batch, nothing else.
CREATE TABLE outreach.export_cursors (
    target       text PRIMARY KEY,
    done_xact    xid8 NOT NULL DEFAULT '0'::xid8,
    done_id      bigint NOT NULL DEFAULT 0,
    planned_xact xid8,               -- NULL: no batch being written
    planned_id   bigint,
    exported     bigint NOT NULL DEFAULT 0,  -- events written, counted once per batch
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_export_cursors_target_check CHECK (target ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    CONSTRAINT outreach_export_cursors_planned_check
        CHECK ((planned_xact IS NULL) = (planned_id IS NULL))
);

-- =============================================================================================
-- 3. Indexes (besides those of the PRIMARY KEY and UNIQUE constraints above)
-- =============================================================================================

-- The claim's order: due rows of a mailbox, oldest first.
CREATE INDEX outreach_emails_queued_idx ON outreach.emails (mailbox_id, scheduled_for, id)
    WHERE status = 'queued';
-- The transactional claim reads only due transactional rows, however many marketing rows wait.
CREATE INDEX outreach_emails_transactional_queued_idx
    ON outreach.emails (mailbox_id, scheduled_for, id)
    WHERE status = 'queued' AND message_class = 'transactional';
-- The reaper and the daily-limit counts look at in-flight and recent rows only.
CREATE INDEX outreach_emails_sending_idx ON outreach.emails (claimed_at) WHERE status = 'sending';
CREATE INDEX outreach_emails_mailbox_claimed_idx ON outreach.emails (mailbox_id, claimed_at);
-- One row per delivery key; partial, so marketing rows (no key) never touch it.
CREATE UNIQUE INDEX outreach_emails_delivery_key_key ON outreach.emails (delivery_key)
    WHERE delivery_key IS NOT NULL;
-- At most one mailbox sends transactional mail when the caller names none.
CREATE UNIQUE INDEX outreach_mailboxes_one_transactional_idx
    ON outreach.mailboxes (transactional) WHERE transactional;
CREATE INDEX outreach_send_log_mailbox_idx ON outreach.send_log (mailbox_id, accepted_at);
CREATE INDEX outreach_email_resolutions_email_idx ON outreach.email_resolutions (email_id);
CREATE INDEX outreach_email_requeues_email_idx ON outreach.email_requeues (email_id);
CREATE INDEX outreach_suppression_events_value_idx
    ON outreach.suppression_events (kind, value, created_at);
CREATE INDEX outreach_source_rows_run ON outreach.source_rows (campaign_id, last_run_id);
CREATE INDEX outreach_mailbox_events_mailbox_idx ON outreach.mailbox_events (mailbox_id, created_at);
CREATE INDEX outreach_campaign_events_campaign_idx
    ON outreach.campaign_events (campaign_id, created_at);
-- Hard bounces and complaints are counted per email (the bounce- and complaint-rate rules).
CREATE INDEX outreach_inbound_messages_email_idx ON outreach.inbound_messages (email_id, class)
    WHERE email_id IS NOT NULL;
CREATE INDEX outreach_alerts_created_idx ON outreach.alerts (created_at);
-- The ESP events of an email (lead show, the campaign page).
CREATE INDEX outreach_esp_events_email_idx ON outreach.esp_events (email_id);
CREATE INDEX outreach_events_email_idx ON outreach.events (email_id);
CREATE INDEX outreach_events_lead_idx ON outreach.events (lead_id);
-- Webhooks out and the warehouse export read the log in (xact, id) order from a boundary.
CREATE INDEX outreach_events_xact_idx ON outreach.events (xact, id);
-- The webhook claim reads the due pending deliveries.
CREATE INDEX outreach_webhook_deliveries_due_idx
    ON outreach.webhook_deliveries (next_attempt_at) WHERE status = 'pending';
-- The company cap counts an organisation's contacts of the day (claim_emails_v3).
CREATE INDEX outreach_org_domains_org_idx ON outreach.org_domains (org);
-- The refresh finds entries that expired (outreach.mxproviders).
CREATE INDEX outreach_mx_providers_expires_idx ON outreach.mx_providers (expires_at);
CREATE INDEX outreach_emails_org_claimed_idx ON outreach.emails (org, claimed_at) INCLUDE (lead_id)
    WHERE org IS NOT NULL;
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
-- The audit trail of a campaign (outreach audit --campaign, the campaign page), and by time.
CREATE INDEX outreach_audit_log_campaign_idx ON outreach.audit_log (campaign_key, at);
CREATE INDEX outreach_audit_log_at_idx ON outreach.audit_log (at);

-- =============================================================================================
-- 4. Functions (bodies exactly as their latest migration wrote them)
-- =============================================================================================

-- ---------------------------------------------------------------------------------------------
-- Suppression
-- ---------------------------------------------------------------------------------------------

-- The normal form of an address: trim what Python's str.strip() trims, Unicode NFC, lower case
-- (the same rule as outreach.addresses.normalize_address, for SQL callers). IMMUTABLE so that a
-- unique index can use it. An all-ASCII address (octet_length = length) is already NFC and can
-- hold only the ASCII characters of the trimmed set: it skips normalize(), most of the cost (0084).
-- Not STRICT, so that the planner inlines it (a STRICT SQL function with a CASE body is not);
-- NULL gives NULL.
CREATE FUNCTION outreach.normalize_address(address text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(address) = length(address)
        THEN lower(btrim(address, U&'\0009\000A\000B\000C\000D\001C\001D\001E\001F\0020'))
        ELSE lower(normalize(btrim(address,
            U&'\0009\000A\000B\000C\000D\001C\001D\001E\001F\0020\0085\00A0\1680\2000\2001\2002\2003\2004\2005\2006\2007\2008\2009\200A\2028\2029\202F\205F\3000'),
            NFC))
    END
$$;
COMMENT ON FUNCTION outreach.normalize_address(text) IS
    'the normal form of an address (trim, NFC, lower case), as outreach.addresses.normalize_address stores it';

-- HMAC-SHA256 (RFC 2104) of message under key, from the built-in sha256() (the pgserver build has
-- no pgcrypto). Checked against Python's hmac module by tests/integration/test_erasure.py.
-- Not STRICT, so that it inlines; NULL gives NULL.
CREATE FUNCTION outreach.hmac_pad(key bytea, pad text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(varbit_send((('x' || rpad(encode(
                CASE WHEN length(key) > 64 THEN sha256(key) ELSE key END, 'hex'), 128, '0'))::bit(512)
            # ('x' || repeat(pad, 64))::bit(512))::varbit) FROM 5)
$$;

CREATE FUNCTION outreach.hmac_sha256(key bytea, message bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(outreach.hmac_pad(key, '5c') || sha256(outreach.hmac_pad(key, '36') || message))
$$;

-- pgcrypto's C hmac() where the server has it (a real PostgreSQL ships it with its contrib
-- files; the pgserver wheel does not): the same RFC 2104 HMAC-SHA256, about three times faster
-- than the SQL one (PostgreSQL 15, 100,000 hashes: 0.4 s against 1.2 s). CREATE EXTENSION fails
-- without the contrib files or the privilege; then the SQL HMAC (0129) stays, nothing else
-- changes. The function keeps its name and signature, so every caller (the fingerprint, the
-- erased address's hash) gets the same bytes either way.
DO $do$
DECLARE
    v_schema name;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pgcrypto;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pgcrypto is not available (%): keeping the SQL HMAC', SQLERRM;
    END;
    SELECT n.nspname INTO v_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pgcrypto';
    IF v_schema IS NOT NULL THEN
        EXECUTE format($f$
CREATE OR REPLACE FUNCTION outreach.hmac_sha256(key bytea, message bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $b$
    SELECT %I.hmac(message, key, 'sha256')
$b$$f$, v_schema);
    END IF;
END
$do$;

-- The session's erasure key (the setting outreach.erasure_key, as UTF-8 bytes), failing closed:
-- once an erasure has happened (outreach.erasure_keys has its fingerprint) a missing key or a
-- key with another fingerprint raises, so no caller can miss an erased person. Before the first
-- erasure it returns NULL (nothing hashed to match), unless p_required (the erasure itself),
-- which raises without a key.
-- A session opened by outreach.db.connect also carries outreach.erasure_key_check = hex
-- sha256(key || its fingerprint), which lets the check skip the SQL HMAC (0139).
CREATE FUNCTION outreach.erasure_key(p_required boolean DEFAULT false) RETURNS bytea
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_setting text := current_setting('outreach.erasure_key', true);
    v_fingerprint text;
BEGIN
    SELECT k.fingerprint INTO v_fingerprint FROM outreach.erasure_keys k;
    IF coalesce(v_setting, '') = '' THEN
        IF p_required OR v_fingerprint IS NOT NULL THEN
            RAISE EXCEPTION 'the erasure key is not set: set OUTREACH_ERASURE_KEY (erased '
                            'addresses are matched by a keyed hash; see docs/howto/erasure.md)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NULL;
    END IF;
    IF v_fingerprint IS NULL THEN
        RETURN CASE WHEN p_required THEN convert_to(v_setting, 'UTF8') END;
    END IF;
    IF current_setting('outreach.erasure_key_check', true)
       = encode(sha256(convert_to(v_setting || v_fingerprint, 'UTF8')), 'hex') THEN
        RETURN convert_to(v_setting, 'UTF8');
    END IF;
    IF v_fingerprint IS DISTINCT FROM encode(outreach.hmac_sha256(convert_to(v_setting, 'UTF8'),
                                                                   'outreach erasure key check'), 'hex') THEN
        RAISE EXCEPTION 'OUTREACH_ERASURE_KEY is not the key erased addresses were hashed with '
                        '(see docs/howto/erasure.md)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN convert_to(v_setting, 'UTF8');
END
$$;

-- The keyed hash an erased address is kept as: HMAC-SHA256 of its normal form, hex.
CREATE FUNCTION outreach.erased_address_hash(address text, p_required boolean DEFAULT false)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT encode(outreach.hmac_sha256(outreach.erasure_key(p_required),
                                       convert_to(outreach.normalize_address(address), 'UTF8')), 'hex')
$$;

-- Which of addresses (any spelling; NULLs ignored) are suppressed for message_class: returned as
-- given (each distinct one once), so a caller joins them back to its rows. Marketing mail honours
-- every suppression; transactional mail ignores unsubscribed and complained. Addresses and
-- domains compare in normal form (outreach.normalize_address), an erased address by its keyed
-- hash (0129), for which the session's erasure key is checked once per call of this function:
-- once someone was erased a missing or other key raises invalid_parameter_value
-- (outreach.erasure_key) whenever an address is not suppressed by address or domain.
CREATE FUNCTION outreach.suppressed_addresses(addresses text[], message_class text DEFAULT 'marketing')
RETURNS TABLE (address text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    WITH k AS MATERIALIZED (
        -- The key (NULL before the first erasure), checked once; materialised, so its column is
        -- a plain value to hmac_sha256 (which then inlines) and erasure_key() runs once.
        SELECT outreach.erasure_key() AS key
    ),
    a AS (
        SELECT DISTINCT x AS address, outreach.normalize_address(x) AS norm
        FROM unnest(addresses) x
        WHERE x IS NOT NULL
    )
    SELECT a.address
    FROM a
    WHERE EXISTS (
        SELECT 1 FROM outreach.suppressions s
        WHERE ((s.kind = 'address' AND s.value = a.norm)
               OR (s.kind = 'domain' AND s.value = split_part(a.norm, '@', 2)))
          AND (message_class = 'marketing' OR s.reason NOT IN ('unsubscribed', 'complained'))
    )
    OR EXISTS (
        SELECT 1 FROM k JOIN outreach.suppressions s
          ON s.kind = 'address_hmac'
         AND s.value = encode(outreach.hmac_sha256(k.key, convert_to(a.norm, 'UTF8')), 'hex')
        WHERE k.key IS NOT NULL
          AND (message_class = 'marketing' OR s.reason NOT IN ('unsubscribed', 'complained'))
    )
$$;

-- The suppression rule: the only place where "may we write to this address?" is decided. Lead
-- import and queueing (lead_stage_mark_suppressed and email_queue_due ask
-- outreach.suppressed_addresses for all their addresses at once; outreach.enqueue_transactional)
-- and the pre-send check all use it. Marketing mail honours every suppression; transactional mail
-- (a receipt, a password reset: mail the recipient asked for by acting) ignores the marketing
-- opt-outs (unsubscribed, complained) and honours bounced, manual, do-not-contact and erased.
-- It is outreach.suppressed_addresses (above) asked about one address (0139).
CREATE FUNCTION outreach.is_suppressed(address text, message_class text DEFAULT 'marketing')
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT EXISTS (SELECT 1 FROM outreach.suppressed_addresses(ARRAY[address], message_class))
$$;

-- ---------------------------------------------------------------------------------------------
-- Send windows
-- ---------------------------------------------------------------------------------------------

-- The first moment at or after `after` inside the window [win_start, win_end) of one of `days`
-- (ISO weekdays) in time zone `tz`. DST-safe: local times become instants by PostgreSQL's time
-- zone rules. The claim takes a campaign row only when this equals now (the window is open).
CREATE FUNCTION outreach.next_send_slot(after timestamptz, tz text, days integer[],
                                        win_start time, win_end time) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    local_day date := (after AT TIME ZONE tz)::date;
    d date;
    opens timestamptz;
    closes timestamptz;
BEGIN
    FOR i IN 0..7 LOOP
        d := local_day + i;
        CONTINUE WHEN NOT (extract(isodow FROM d)::integer = ANY (days));
        opens := (d + win_start) AT TIME ZONE tz;
        closes := (d + win_end) AT TIME ZONE tz;
        IF after < opens THEN
            RETURN opens;
        ELSIF after < closes THEN
            RETURN after;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'no send slot within 8 days of % in % (days %, % to %)',
        after, tz, days, win_start, win_end USING ERRCODE = 'data_exception';
END
$$;

-- The country whose holidays apply to a lead: its custom column `country` (an ISO code, any
-- case, blanks ignored), else the campaign's; NULL: no holidays. Inlined (IMMUTABLE SQL).
CREATE FUNCTION outreach.lead_country(p_custom jsonb, p_campaign_country text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(CASE WHEN upper(btrim(p_custom ->> 'country')) ~ '^[A-Z]{2}$'
                         THEN upper(btrim(p_custom ->> 'country')) END,
                    p_campaign_country)
$$;

-- Why the local day p_day is closed to campaign mail for a lead of p_country in a campaign with
-- p_blackout: 'holiday in DE', 'blackout date 2026-12-24', or NULL (open).
CREATE FUNCTION outreach.day_closed(p_day date, p_country text, p_blackout date[]) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_day = ANY (p_blackout) THEN 'blackout date ' || p_day
                WHEN EXISTS (SELECT 1 FROM outreach.holidays h
                             WHERE h.country = p_country AND h.day = p_day)
                THEN 'holiday in ' || p_country END
$$;

-- outreach.next_send_slot that also skips closed days (outreach.day_closed): the first moment at
-- or after `after` inside the window of one of `days` in `tz` that is no holiday of p_country
-- and no blackout date. Looks 60 days ahead (a blackout of weeks); raises data_exception past.
CREATE FUNCTION outreach.next_open_slot(after timestamptz, tz text, days integer[],
                                        win_start time, win_end time, p_country text,
                                        p_blackout date[]) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    local_day date := (after AT TIME ZONE tz)::date;
    d date;
    opens timestamptz;
    closes timestamptz;
BEGIN
    FOR i IN 0..60 LOOP
        d := local_day + i;
        CONTINUE WHEN NOT (extract(isodow FROM d)::integer = ANY (days))
                   OR outreach.day_closed(d, p_country, p_blackout) IS NOT NULL;
        opens := (d + win_start) AT TIME ZONE tz;
        closes := (d + win_end) AT TIME ZONE tz;
        IF after < opens THEN
            RETURN opens;
        ELSIF after < closes THEN
            RETURN after;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'no open send slot within 61 days of % in % (days %, % to %, country %, blackout %)',
        after, tz, days, win_start, win_end, p_country, p_blackout USING ERRCODE = 'data_exception';
END
$$;

-- p_from plus p_days working days in time zone p_tz: the local date moves forward one day at a
-- time, counting only Monday to Friday days that are no holiday of p_country; the local time of
-- day is kept (DST-safe, as next_send_slot). 0 days: p_from. A business_days campaign's step is
-- due at add_working_days(previous send, delay_days) (email_queue_due).
CREATE FUNCTION outreach.add_working_days(p_from timestamptz, p_days integer, p_tz text,
                                          p_country text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    local_ts timestamp := p_from AT TIME ZONE p_tz;
    d date := local_ts::date;
    left_ integer := p_days;
BEGIN
    IF p_days <= 0 THEN
        RETURN p_from;
    END IF;
    WHILE left_ > 0 LOOP
        d := d + 1;
        IF extract(isodow FROM d) < 6
           AND NOT EXISTS (SELECT 1 FROM outreach.holidays h WHERE h.country = p_country AND h.day = d) THEN
            left_ := left_ - 1;
        END IF;
    END LOOP;
    RETURN (d + local_ts::time) AT TIME ZONE p_tz;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Warm-up
-- ---------------------------------------------------------------------------------------------

-- The warm-up rule: how many emails a mailbox may start on the local day that contains `at`:
-- warmup_initial a day for warmup_days days, then + warmup_increment a day, capped by daily_cap
-- (no warmup_start: daily_cap). Default ramp: at most 10 a day in the first week (Gmail and Yahoo
-- sender guidance). Used by the pacing rule (mailbox_remaining_today) and the reports.
CREATE FUNCTION outreach.mailbox_daily_limit(m outreach.mailboxes, at timestamptz) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN m.warmup_start IS NULL THEN m.daily_cap
        ELSE least(m.daily_cap, greatest(0, CASE
            WHEN (at AT TIME ZONE m.timezone)::date < m.warmup_start THEN 0
            WHEN (at AT TIME ZONE m.timezone)::date - m.warmup_start < m.warmup_days
                THEN m.warmup_initial
            ELSE m.warmup_initial + m.warmup_increment
                 * ((at AT TIME ZONE m.timezone)::date - m.warmup_start - m.warmup_days + 1)
        END))
    END
$$;

-- ---------------------------------------------------------------------------------------------
-- Pacing
-- ---------------------------------------------------------------------------------------------

-- The pacing rule itself is the named query mailbox_remaining_today (sql/queries/): under the
-- mailbox lock (mailbox_lock), what is left of the day's limit (outreach.mailbox_daily_limit,
-- counted per local day from claimed_at) and this send run's share of it, the day spread evenly
-- over the send runs of the full window; the claim takes at most that. The gap between two
-- handoffs is mailbox_reserve_handoffs (mailboxes.next_handoff_at). This function gives the span
-- of the day's window that pacing divides:
-- `opens`/`closes`, the earliest and latest open moments of the window [win_start, win_end) of
-- one of `days` in `tz` within [after, until) (clipped), both NULL when it is closed throughout.
CREATE FUNCTION outreach.send_window_span(after timestamptz, until timestamptz, tz text,
                                          days integer[], win_start time, win_end time,
                                          OUT opens timestamptz, OUT closes timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    d date;
    o timestamptz;
    c timestamptz;
BEGIN
    -- A window of the previous local day can still be open at `after` (win_end is at most 24:00).
    d := (after AT TIME ZONE tz)::date - 1;
    WHILE d <= (until AT TIME ZONE tz)::date LOOP
        IF extract(isodow FROM d)::integer = ANY (days) THEN
            o := (d + win_start) AT TIME ZONE tz;
            c := (d + win_end) AT TIME ZONE tz;
            IF o < until AND c > after THEN
                opens := least(opens, greatest(o, after));
                closes := greatest(closes, least(c, until));
            END IF;
        END IF;
        d := d + 1;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- The claim
-- ---------------------------------------------------------------------------------------------

-- The quarter-hour (UTC) of a moment: the bucket of outreach.mailbox_claim_counts.
CREATE FUNCTION outreach.claim_quarter(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT date_bin(interval '15 minutes', at, timestamptz '2000-01-01 00:00:00+00')
$$;

-- Claim up to p_limit due rows of one mailbox for one sender, and return them as they now are
-- ('sending', a fresh claim token, claimed_at = the claim's moment, attempts + 1).
--   p_message_class  'marketing': queued campaign rows of an active campaign whose send window
--                    (outreach.next_send_slot, in the lead's time zone, else the campaign's) is
--                    open now; the caller holds the mailbox lock and caps p_limit by the pacing
--                    rule (mailbox_remaining_today). 'transactional': queued transactional rows
--                    of an active mailbox; no window, cap or warm-up holds them back.
--   p_now            the claim's moment (NULL: now()); tests pass a fixed clock.
-- The rows are locked FOR NO KEY UPDATE SKIP LOCKED (the lock the UPDATE takes anyway): two
-- claims skip each other's rows, and rows that reference a claimed email (its send_log row) are
-- not held up. The locking SELECT runs exactly once, as its own statement: written inline as
-- `e.id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)` the planner may run it as a subplan
-- rescanned per row, each rescan skipping the rows the statement already updated and returning
-- the next n — one claim took a mailbox's whole queue (CI failure of 2026-11-30; until 0018 the
-- named queries ran it once as a MATERIALIZED CTE). The UPDATE is guarded by status = 'queued'.
-- The window test reads `next_send_slot(…) <= v_now` (0085): with `= v_now` the planner estimated
-- a handful of the mailbox's queued rows to pass, joined all of them by hash and sorted them before
-- keeping p_limit (13 ms a claim at 2,500 queued rows, growing with the queue, under the mailbox
-- lock); it now reads the queue index in order and stops at the limit (2.3 ms).
-- The UPDATE never reads the picked rows out of the partial queue index, whatever the statistics
-- say (0086): by primary key, or on a table of a few thousand rows a sequential scan.
-- Raises invalid_parameter_value for another message class.
CREATE FUNCTION outreach.claim_emails_v1(p_message_class text, p_mailbox_id bigint,
                                         p_limit integer, p_claim_token uuid, p_claimed_by text,
                                         p_now timestamptz DEFAULT NULL)
RETURNS SETOF outreach.emails
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_picked bigint[];
BEGIN
    IF p_message_class = 'marketing' THEN
        v_picked := ARRAY(
            SELECT q.id
            FROM outreach.emails q
            JOIN outreach.campaigns c ON c.id = q.campaign_id
            JOIN outreach.leads l ON l.id = q.lead_id
            WHERE q.status = 'queued'
              AND q.mailbox_id = p_mailbox_id
              AND q.scheduled_for <= v_now
              AND c.status = 'active'
              -- <= means = here (the next slot is never before v_now); written <= so the planner
              -- expects many rows to pass and walks the queue index in order to the limit.
              AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                          c.window_start, c.window_end) <= v_now
            ORDER BY q.scheduled_for, q.id
            LIMIT p_limit
            FOR NO KEY UPDATE OF q SKIP LOCKED);
    ELSIF p_message_class = 'transactional' THEN
        v_picked := ARRAY(
            SELECT q.id
            FROM outreach.emails q
            JOIN outreach.mailboxes mb ON mb.id = q.mailbox_id
            WHERE q.status = 'queued' AND q.message_class = 'transactional'
              AND q.mailbox_id = p_mailbox_id AND q.scheduled_for <= v_now
              AND mb.status = 'active'
            ORDER BY q.scheduled_for, q.id
            LIMIT p_limit
            FOR NO KEY UPDATE OF q SKIP LOCKED);
    ELSE
        RAISE EXCEPTION 'message class must be marketing or transactional, got %', p_message_class
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    UPDATE outreach.emails e
    SET status = 'sending', claim_token = p_claim_token, claimed_at = v_now,
        claimed_by = p_claimed_by, attempts = e.attempts + 1, updated_at = v_now
    -- The guard is written IS NOT DISTINCT FROM so that it cannot select a partial index on
    -- status (0086): with statistics that say few rows are queued (right after queue-due, before
    -- autovacuum's ANALYZE), `status = 'queued'` let the planner read the picked ids out of
    -- outreach_emails_queued_idx, a scan of the whole queue per claim, instead of the primary key.
    WHERE e.id = ANY (v_picked) AND e.status IS NOT DISTINCT FROM 'queued'
    RETURNING e.*;
END
$$;

-- The claim with the contact policy (0111; docs/explanation/contact-policy.md): as
-- claim_emails_v1 (which it calls for transactional mail and when both caps are NULL), and for
-- each picked campaign row, in order, the per-person frequency cap: at most p_person_per_day
-- touches of the lead since UTC midnight and p_person_per_week in the last 7 days, across all
-- campaigns (a touch: a marketing row sending, sent or failed as unconfirmed, by claimed_at). A
-- person is one lead row (leads.email is the one normal form). Each row is decided under
-- pg_try_advisory_xact_lock on 'outreach.person:<lead id>', held to the end of the claim's
-- transaction: another claimer holding it makes this one skip the row (still queued, untouched);
-- once it committed, this count (a fresh snapshot, READ COMMITTED) sees its row. try-lock never
-- waits, so no order of locks deadlocks. A row over a cap stays queued: scheduled_for moves to
-- the next UTC midnight (day cap) or to when the oldest touch of the 7 days leaves them (week
-- cap), and hold_reason says which. Raises invalid_parameter_value for a cap below 1.
CREATE FUNCTION outreach.claim_emails_v2(p_message_class text, p_mailbox_id bigint,
                                         p_limit integer, p_claim_token uuid, p_claimed_by text,
                                         p_now timestamptz DEFAULT NULL,
                                         p_person_per_day integer DEFAULT NULL,
                                         p_person_per_week integer DEFAULT NULL)
RETURNS SETOF outreach.emails
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_today timestamptz := date_trunc('day', coalesce(p_now, now()) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    v_picked bigint[];
    v_row record;
    v_day integer;
    v_week integer;
    v_oldest timestamptz;
BEGIN
    IF p_message_class <> 'marketing' OR (p_person_per_day IS NULL AND p_person_per_week IS NULL) THEN
        RETURN QUERY SELECT * FROM outreach.claim_emails_v1(p_message_class, p_mailbox_id, p_limit,
                                                            p_claim_token, p_claimed_by, v_now);
        RETURN;
    END IF;
    IF p_person_per_day < 1 OR p_person_per_week < 1 THEN
        RAISE EXCEPTION 'contact caps must be at least 1 (or NULL: off), got % a day, % a week',
                        p_person_per_day, p_person_per_week
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The pick of claim_emails_v1 (its comments say why it is written so).
    v_picked := ARRAY(
        SELECT q.id
        FROM outreach.emails q
        JOIN outreach.campaigns c ON c.id = q.campaign_id
        JOIN outreach.leads l ON l.id = q.lead_id
        WHERE q.status = 'queued'
          AND q.mailbox_id = p_mailbox_id
          AND q.scheduled_for <= v_now
          AND c.status = 'active'
          AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                      c.window_start, c.window_end) <= v_now
        ORDER BY q.scheduled_for, q.id
        LIMIT p_limit
        FOR NO KEY UPDATE OF q SKIP LOCKED);
    FOR v_row IN SELECT q.id, q.lead_id FROM outreach.emails q WHERE q.id = ANY (v_picked)
                 ORDER BY q.scheduled_for, q.id LOOP
        -- The person's lock, held to the end of the claim's transaction. Held by another claimer:
        -- skip the row this time (it stays queued, untouched).
        IF NOT pg_try_advisory_xact_lock(hashtextextended('outreach.person:' || v_row.lead_id, 0)) THEN
            CONTINUE;
        END IF;
        SELECT count(*) FILTER (WHERE e.claimed_at >= v_today)::integer, count(*)::integer,
               min(e.claimed_at)
        INTO v_day, v_week, v_oldest
        FROM outreach.emails e
        WHERE e.lead_id = v_row.lead_id AND e.message_class = 'marketing'
          AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
          AND e.claimed_at > v_now - interval '7 days';
        IF v_day >= coalesce(p_person_per_day, 2147483647)
           OR v_week >= coalesce(p_person_per_week, 2147483647) THEN
            UPDATE outreach.emails e
            SET scheduled_for = CASE
                    WHEN v_week >= coalesce(p_person_per_week, 2147483647)
                    THEN greatest(v_oldest + interval '7 days', v_today + interval '1 day')
                    ELSE v_today + interval '1 day' END,
                hold_reason = CASE
                    WHEN v_week >= coalesce(p_person_per_week, 2147483647)
                    THEN 'frequency cap: ' || p_person_per_week || ' a week'
                    ELSE 'frequency cap: ' || p_person_per_day || ' a day' END,
                updated_at = v_now
            WHERE e.id = v_row.id AND e.status IS NOT DISTINCT FROM 'queued';
            CONTINUE;
        END IF;
        RETURN QUERY
        UPDATE outreach.emails e
        SET status = 'sending', claim_token = p_claim_token, claimed_at = v_now,
            claimed_by = p_claimed_by, attempts = e.attempts + 1, updated_at = v_now,
            hold_reason = NULL
        WHERE e.id = v_row.id AND e.status IS NOT DISTINCT FROM 'queued'
        RETURNING e.*;
    END LOOP;
END
$$;

-- The contact policy in one set-based claim (0132): the person per 24 h and 7 days, the
-- company per 24 h, and more rounds when picked rows were held. Its steps and why the locks and
-- the decision are separate statements: docs/explanation/contact-policy.md.
-- Each is a set-returning SQL function (one row for every address) that PostgreSQL inlines into
-- the query that joins it (0144): the claim joins them; org_of and provider_of read them.
-- The organisation of an address: its mapped org, NULL for free mail, else its own domain.
CREATE FUNCTION outreach.email_org(p_email text) RETURNS TABLE (org text)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT CASE WHEN d.domain IS NULL THEN e.domain
                WHEN d.free_mail THEN NULL ELSE d.org END
    FROM (SELECT outreach.email_domain(p_email) AS domain OFFSET 0) e
    LEFT JOIN outreach.org_domains d ON d.domain = e.domain
$$;

-- The mailbox provider of an address at p_now: the cached provider of its domain while the
-- entry has not expired, else 'other' (never a lookup).
CREATE FUNCTION outreach.email_provider(p_email text, p_now timestamptz)
RETURNS TABLE (provider text)
LANGUAGE sql STABLE PARALLEL SAFE ROWS 1 AS $$
    SELECT coalesce(m.provider, 'other')
    FROM (SELECT outreach.email_domain(p_email) AS domain OFFSET 0) e
    LEFT JOIN outreach.mx_providers m ON m.domain = e.domain AND m.expires_at > p_now
$$;

CREATE FUNCTION outreach.org_of(p_email text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT o.org FROM outreach.email_org(p_email) o
$$;

CREATE FUNCTION outreach.provider_of(p_email text, p_now timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT p.provider FROM outreach.email_provider(p_email, p_now) p
$$;

CREATE FUNCTION outreach.claim_emails_v4(p_message_class text, p_mailbox_id bigint,
                                         p_limit integer, p_claim_token uuid, p_claimed_by text,
                                         p_now timestamptz DEFAULT NULL,
                                         p_person_per_day integer DEFAULT NULL,
                                         p_person_per_week integer DEFAULT NULL,
                                         p_company_per_day integer DEFAULT NULL,
                                         p_provider_hourly jsonb DEFAULT NULL)
RETURNS SETOF outreach.emails
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_day_cap integer := coalesce(p_person_per_day, 2147483647);
    v_week_cap integer := coalesce(p_person_per_week, 2147483647);
    v_org_cap integer := coalesce(p_company_per_day, 2147483647);
    v_left integer := p_limit;
    v_seen bigint[] := '{}';
    v_picked bigint[];
    v_people bigint[];
    v_orgs text[];
    v_claimed integer;
    v_held jsonb := '{}';
    v_busy integer := 0;
    v_provider_caps jsonb := nullif(p_provider_hourly, '{}'::jsonb);
    -- No cap: no advisory lock is needed (the row locks keep claimers apart), only the calendar.
    v_caps boolean := p_person_per_day IS NOT NULL OR p_person_per_week IS NOT NULL
                      OR p_company_per_day IS NOT NULL;
BEGIN
    -- What this call held back and skipped, for the caller's summary line (0146): read with
    -- current_setting('outreach.claim_held', true) in the same transaction, right after.
    PERFORM set_config('outreach.claim_held', '', true);
    IF p_message_class <> 'marketing' THEN
        RETURN QUERY SELECT * FROM outreach.claim_emails_v1(p_message_class, p_mailbox_id, p_limit,
                                                            p_claim_token, p_claimed_by, v_now);
        RETURN;
    END IF;
    IF p_person_per_day < 1 OR p_person_per_week < 1 OR p_company_per_day < 1 THEN
        RAISE EXCEPTION 'contact caps must be at least 1 (or NULL: off), got % a day, % a week, % people of a company a day',
                        p_person_per_day, p_person_per_week, p_company_per_day
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_provider_caps IS NOT NULL AND (
           jsonb_typeof(v_provider_caps) <> 'object'
           OR EXISTS (SELECT 1 FROM jsonb_each(v_provider_caps) c
                      WHERE c.key NOT IN ('google', 'microsoft', 'yahoo', 'apple', 'other')
                         OR jsonb_typeof(c.value) <> 'number' OR c.value::numeric < 1
                         OR c.value::numeric <> trunc(c.value::numeric))) THEN
        RAISE EXCEPTION 'provider caps must be an object of google, microsoft, yahoo, apple or other to a whole number of at least 1, got %',
                        v_provider_caps USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A mailbox frozen on its local date (mailboxes.freeze_from … freeze_to, the mailbox file's
    -- `freeze:`) takes nothing: its rows stay queued as they are, for after the freeze.
    IF EXISTS (SELECT 1 FROM outreach.mailboxes m
               WHERE m.id = p_mailbox_id
                 AND (v_now AT TIME ZONE m.timezone)::date BETWEEN m.freeze_from AND m.freeze_to) THEN
        RETURN;
    END IF;
    -- At most four rounds: a round whose rows were all held leaves the limit unspent, and the
    -- held rows' scheduled_for is now later, so the next round picks the rows behind them.
    FOR v_round IN 1..4 LOOP
        EXIT WHEN v_left <= 0;
        -- The pick of claim_emails_v1 (its comments say why it is written so).
        v_picked := ARRAY(
            SELECT q.id
            FROM outreach.emails q
            JOIN outreach.campaigns c ON c.id = q.campaign_id
            JOIN outreach.leads l ON l.id = q.lead_id
            WHERE q.status = 'queued'
              AND q.mailbox_id = p_mailbox_id
              AND q.scheduled_for <= v_now
              AND c.status = 'active'
              AND q.id <> ALL (v_seen)
              AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                          c.window_start, c.window_end) <= v_now
            ORDER BY q.scheduled_for, q.id
            LIMIT v_left
            FOR NO KEY UPDATE OF q SKIP LOCKED);
        EXIT WHEN cardinality(v_picked) = 0;
        v_seen := v_seen || v_picked;
        -- The locks, each statement after the one before (a lock taken here is seen as held by
        -- every other claimer until this transaction ends).
        v_people := ARRAY(
            SELECT p.lead_id
            FROM (SELECT DISTINCT q.lead_id FROM outreach.emails q WHERE q.id = ANY (v_picked)) p
            WHERE NOT v_caps
               OR pg_try_advisory_xact_lock(hashtextextended('outreach.person:' || p.lead_id, 0)));
        v_orgs := ARRAY(
            SELECT o.org
            FROM (SELECT DISTINCT eo.org
                  FROM outreach.emails q JOIN outreach.leads l ON l.id = q.lead_id
                  CROSS JOIN LATERAL outreach.email_org(l.email) eo
                  WHERE q.id = ANY (v_picked) AND q.lead_id = ANY (v_people)) o
            WHERE o.org IS NOT NULL
              AND (p_company_per_day IS NULL
                   OR pg_try_advisory_xact_lock(hashtextextended('outreach.org:' || o.org, 0))));
        -- The decision, on a snapshot taken after the locks.
        RETURN QUERY
        WITH cal AS (
            -- The calendar (0137): the lead's local date is a blackout date of the campaign or a
            -- holiday of the lead's country (one join on outreach.holidays). Such a row is held
            -- to the next open slot whatever the caps say, and counts for no cap.
            SELECT q.id, q.lead_id, eo.org, pv.provider,
                   row_number() OVER (ORDER BY q.scheduled_for, q.id) AS ord,
                   CASE WHEN z.today = ANY (c.blackout_dates) THEN 'blackout date ' || z.today
                        WHEN h.day IS NOT NULL THEN 'holiday in ' || h.country END AS closed,
                   z.tz, z.country, c.send_days, c.window_start, c.window_end, c.blackout_dates
            FROM outreach.emails q
            JOIN outreach.leads l ON l.id = q.lead_id
            JOIN outreach.campaigns c ON c.id = q.campaign_id
            CROSS JOIN LATERAL (
                SELECT coalesce(l.timezone, c.timezone) AS tz,
                       outreach.lead_country(l.custom, c.country) AS country,
                       (v_now AT TIME ZONE coalesce(l.timezone, c.timezone))::date AS today) z
            LEFT JOIN outreach.holidays h ON h.country = z.country AND h.day = z.today
            -- The organisation and the provider as joins (outreach.email_org and
            -- outreach.email_provider are inlined into this query: one index lookup each).
            CROSS JOIN LATERAL outreach.email_org(l.email) eo
            CROSS JOIN LATERAL outreach.email_provider(l.email, v_now) pv
            WHERE q.id = ANY (v_picked) AND q.lead_id = ANY (v_people)
        ), cand AS (
            SELECT id, lead_id, org, provider, ord FROM cal WHERE closed IS NULL
        ), mine AS (
            SELECT * FROM cand WHERE org IS NULL OR org = ANY (v_orgs)
        ), touches AS (
            -- A touch: a campaign row of the person that is sending or sent (or unconfirmed: it
            -- may have gone out), by claimed_at. day_orgs: the organisations the person's
            -- touches of the last 24 hours were claimed for (emails.org): a person already
            -- contacted for the organisation does not count twice for it.
            SELECT e.lead_id,
                   count(*) FILTER (WHERE e.claimed_at > v_now - interval '1 day') AS day_n,
                   min(e.claimed_at) FILTER (WHERE e.claimed_at > v_now - interval '1 day') AS day_first,
                   count(*) AS week_n, min(e.claimed_at) AS week_first,
                   array_agg(DISTINCT e.org) FILTER (WHERE e.claimed_at > v_now - interval '1 day'
                                                     AND e.org IS NOT NULL) AS day_orgs
            FROM outreach.emails e
            WHERE v_caps AND e.lead_id IN (SELECT lead_id FROM mine) AND e.message_class = 'marketing'
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
              AND e.claimed_at > v_now - interval '7 days'
            GROUP BY e.lead_id
        ), person AS (
            SELECT m.*, coalesce(t.day_n, 0) AS day_n, t.day_first,
                   coalesce(t.week_n, 0) AS week_n, t.week_first, t.day_orgs,
                   row_number() OVER (PARTITION BY m.lead_id ORDER BY m.ord) AS lead_rn
            FROM mine m LEFT JOIN touches t USING (lead_id)
        ), org_people AS (
            -- The people of each organisation contacted in the last 24 hours (any campaign), by
            -- the organisation each row was claimed for (emails.org, index
            -- outreach_emails_org_claimed_idx: only that day's contacts are read).
            SELECT e.org, e.lead_id, min(e.claimed_at) AS first_at
            FROM outreach.emails e
            WHERE p_company_per_day IS NOT NULL
              AND e.org = ANY (v_orgs)
              AND e.claimed_at > v_now - interval '1 day'
              AND e.message_class = 'marketing'
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
            GROUP BY 1, 2
        ), org_counts AS (
            SELECT org, count(*) AS n, min(first_at) AS first_at FROM org_people GROUP BY org
        ), provider_counts AS (
            -- This mailbox's touches of each recipient provider in the last hour (the mailbox
            -- row is locked by the caller for the whole claim: these counts are serialized), by
            -- the provider each row was claimed for (emails.provider, 0144); a row claimed
            -- without it (by claim_emails_v3) by its recipient's provider now.
            SELECT coalesce(e.provider,
                            outreach.provider_of((SELECT l3.email FROM outreach.leads l3
                                                  WHERE l3.id = e.lead_id), v_now)) AS provider,
                   count(*) AS n, min(e.claimed_at) AS first_at
            FROM outreach.emails e
            WHERE v_provider_caps IS NOT NULL
              AND e.mailbox_id = p_mailbox_id AND e.message_class = 'marketing'
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
              AND e.claimed_at > v_now - interval '1 hour'
            GROUP BY 1
        ), person_passed AS (
            SELECT p.*, (p.day_n + p.lead_rn <= v_day_cap AND p.week_n + p.lead_rn <= v_week_cap) AS person_ok,
                   coalesce(p.org = ANY (p.day_orgs), false) AS org_known,
                   (v_provider_caps ->> p.provider)::integer AS provider_cap
            FROM person p
        ), passed AS (
            -- The provider cap ranks only rows within the person caps, in pick order; the
            -- company rank below counts only rows within the provider cap.
            SELECT pp.*, pc.first_at AS provider_first,
                   (NOT pp.person_ok OR pp.provider_cap IS NULL
                    OR coalesce(pc.n, 0) + row_number() OVER (PARTITION BY pp.person_ok, pp.provider
                                                              ORDER BY pp.ord) <= pp.provider_cap)
                       AS provider_ok
            FROM person_passed pp LEFT JOIN provider_counts pc ON pc.provider = pp.provider
        ), new_people AS (
            -- Each person this claim would newly contact at an organisation, ranked in pick order.
            SELECT org, lead_id, dense_rank() OVER (PARTITION BY org ORDER BY first_ord, lead_id) AS org_rank
            FROM (SELECT org, lead_id, min(ord) AS first_ord FROM passed
                  WHERE person_ok AND provider_ok AND org IS NOT NULL AND NOT org_known
                  GROUP BY org, lead_id) s
        ), decided AS (
            SELECT p.id, p.org, p.provider,
                   CASE WHEN NOT p.person_ok OR NOT p.provider_ok THEN false
                        WHEN p.org IS NULL OR p.org_known OR p_company_per_day IS NULL THEN true
                        ELSE coalesce(oc.n, 0) + np.org_rank <= v_org_cap END AS take,
                   CASE WHEN p.week_n + p.lead_rn > v_week_cap
                        THEN 'frequency cap: ' || p_person_per_week || ' a week'
                        WHEN p.day_n + p.lead_rn > v_day_cap
                        THEN 'frequency cap: ' || p_person_per_day || ' a day'
                        WHEN NOT p.provider_ok
                        THEN 'provider cap: ' || p.provider || ' ' || p.provider_cap || ' an hour'
                        ELSE 'company cap: ' || p_company_per_day || ' people a day at ' || p.org
                   END AS reason,
                   CASE WHEN p.week_n + p.lead_rn > v_week_cap
                        THEN greatest(coalesce(p.week_first, v_now) + interval '7 days',
                                      coalesce(p.day_first, v_now) + interval '1 day')
                        WHEN p.day_n + p.lead_rn > v_day_cap
                        THEN coalesce(p.day_first, v_now) + interval '1 day'
                        WHEN NOT p.provider_ok
                        THEN coalesce(p.provider_first, v_now) + interval '1 hour'
                        ELSE coalesce(oc.first_at, v_now) + interval '1 day'
                   END AS hold_until
            FROM passed p
            LEFT JOIN org_counts oc ON oc.org = p.org
            LEFT JOIN new_people np ON np.org = p.org AND np.lead_id = p.lead_id
            UNION ALL
            SELECT k.id, NULL::text, NULL::text, false, k.closed,
                   outreach.next_open_slot(v_now, k.tz, k.send_days, k.window_start, k.window_end,
                                           k.country, k.blackout_dates)
            FROM cal k WHERE k.closed IS NOT NULL
        ), held AS (
            UPDATE outreach.emails e
            SET scheduled_for = d.hold_until, hold_reason = d.reason, updated_at = v_now
            FROM decided d
            WHERE e.id = d.id AND NOT d.take AND e.status IS NOT DISTINCT FROM 'queued'
            RETURNING e.id
        )
        UPDATE outreach.emails e
        SET status = 'sending', claim_token = p_claim_token, claimed_at = v_now,
            claimed_by = p_claimed_by, attempts = e.attempts + 1, updated_at = v_now,
            hold_reason = NULL, org = d.org, provider = d.provider
        FROM decided d
        WHERE e.id = d.id AND d.take AND e.status IS NOT DISTINCT FROM 'queued'
        RETURNING e.*;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        v_left := v_left - v_claimed;
        -- The round's picks neither claimed nor held: still due, their person's or
        -- organisation's lock held by another claimer (the next claim takes them) -- and those
        -- held, by reason (their scheduled_for moved past now: only this round moved it).
        v_busy := v_busy + (SELECT count(*)::integer FROM outreach.emails q
                            WHERE q.id = ANY (v_picked) AND q.status = 'queued'
                              AND q.scheduled_for <= v_now);
        SELECT coalesce(jsonb_object_agg(t.reason, t.n), '{}') INTO v_held
        FROM (SELECT u.reason, sum(u.n)::integer AS n
              FROM (SELECT h.key AS reason, h.value::integer AS n FROM jsonb_each_text(v_held) h
                    UNION ALL
                    SELECT q.hold_reason, count(*)::integer FROM outreach.emails q
                    WHERE q.id = ANY (v_picked) AND q.status = 'queued'
                      AND q.scheduled_for > v_now AND q.hold_reason IS NOT NULL
                    GROUP BY q.hold_reason) u
              GROUP BY u.reason) t;
    END LOOP;
    PERFORM set_config('outreach.claim_held',
                       jsonb_build_object('held', v_held, 'busy', v_busy)::text, true);
END
$$;
COMMENT ON FUNCTION outreach.claim_emails_v4 IS
    'the claim with the contact policy (person per 24 h and 7 days, company per 24 h) and per-mailbox hourly caps per recipient provider; docs/explanation/contact-policy.md';


CREATE FUNCTION outreach.claim_emails_v3(p_message_class text, p_mailbox_id bigint,
                                         p_limit integer, p_claim_token uuid, p_claimed_by text,
                                         p_now timestamptz DEFAULT NULL,
                                         p_person_per_day integer DEFAULT NULL,
                                         p_person_per_week integer DEFAULT NULL,
                                         p_company_per_day integer DEFAULT NULL)
RETURNS SETOF outreach.emails
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_day_cap integer := coalesce(p_person_per_day, 2147483647);
    v_week_cap integer := coalesce(p_person_per_week, 2147483647);
    v_org_cap integer := coalesce(p_company_per_day, 2147483647);
    v_left integer := p_limit;
    v_seen bigint[] := '{}';
    v_picked bigint[];
    v_people bigint[];
    v_orgs text[];
    v_claimed integer;
    -- No cap: no advisory lock is needed (the row locks keep claimers apart), only the calendar.
    v_caps boolean := p_person_per_day IS NOT NULL OR p_person_per_week IS NOT NULL
                      OR p_company_per_day IS NOT NULL;
BEGIN
    IF p_message_class <> 'marketing' THEN
        RETURN QUERY SELECT * FROM outreach.claim_emails_v1(p_message_class, p_mailbox_id, p_limit,
                                                            p_claim_token, p_claimed_by, v_now);
        RETURN;
    END IF;
    IF p_person_per_day < 1 OR p_person_per_week < 1 OR p_company_per_day < 1 THEN
        RAISE EXCEPTION 'contact caps must be at least 1 (or NULL: off), got % a day, % a week, % people of a company a day',
                        p_person_per_day, p_person_per_week, p_company_per_day
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A mailbox frozen on its local date (mailboxes.freeze_from … freeze_to, the mailbox file's
    -- `freeze:`) takes nothing: its rows stay queued as they are, for after the freeze.
    IF EXISTS (SELECT 1 FROM outreach.mailboxes m
               WHERE m.id = p_mailbox_id
                 AND (v_now AT TIME ZONE m.timezone)::date BETWEEN m.freeze_from AND m.freeze_to) THEN
        RETURN;
    END IF;
    -- At most four rounds: a round whose rows were all held leaves the limit unspent, and the
    -- held rows' scheduled_for is now later, so the next round picks the rows behind them.
    FOR v_round IN 1..4 LOOP
        EXIT WHEN v_left <= 0;
        -- The pick of claim_emails_v1 (its comments say why it is written so).
        v_picked := ARRAY(
            SELECT q.id
            FROM outreach.emails q
            JOIN outreach.campaigns c ON c.id = q.campaign_id
            JOIN outreach.leads l ON l.id = q.lead_id
            WHERE q.status = 'queued'
              AND q.mailbox_id = p_mailbox_id
              AND q.scheduled_for <= v_now
              AND c.status = 'active'
              AND q.id <> ALL (v_seen)
              AND outreach.next_send_slot(v_now, coalesce(l.timezone, c.timezone), c.send_days,
                                          c.window_start, c.window_end) <= v_now
            ORDER BY q.scheduled_for, q.id
            LIMIT v_left
            FOR NO KEY UPDATE OF q SKIP LOCKED);
        EXIT WHEN cardinality(v_picked) = 0;
        v_seen := v_seen || v_picked;
        -- The locks, each statement after the one before (a lock taken here is seen as held by
        -- every other claimer until this transaction ends).
        v_people := ARRAY(
            SELECT p.lead_id
            FROM (SELECT DISTINCT q.lead_id FROM outreach.emails q WHERE q.id = ANY (v_picked)) p
            WHERE NOT v_caps
               OR pg_try_advisory_xact_lock(hashtextextended('outreach.person:' || p.lead_id, 0)));
        v_orgs := ARRAY(
            SELECT o.org
            FROM (SELECT DISTINCT outreach.org_of(l.email) AS org
                  FROM outreach.emails q JOIN outreach.leads l ON l.id = q.lead_id
                  WHERE q.id = ANY (v_picked) AND q.lead_id = ANY (v_people)) o
            WHERE o.org IS NOT NULL
              AND (p_company_per_day IS NULL
                   OR pg_try_advisory_xact_lock(hashtextextended('outreach.org:' || o.org, 0))));
        -- The decision, on a snapshot taken after the locks.
        RETURN QUERY
        WITH cal AS (
            -- The calendar (0137): the lead's local date is a blackout date of the campaign or a
            -- holiday of the lead's country (one join on outreach.holidays). Such a row is held
            -- to the next open slot whatever the caps say, and counts for no cap.
            SELECT q.id, q.lead_id, outreach.org_of(l.email) AS org,
                   row_number() OVER (ORDER BY q.scheduled_for, q.id) AS ord,
                   CASE WHEN z.today = ANY (c.blackout_dates) THEN 'blackout date ' || z.today
                        WHEN h.day IS NOT NULL THEN 'holiday in ' || h.country END AS closed,
                   z.tz, z.country, c.send_days, c.window_start, c.window_end, c.blackout_dates
            FROM outreach.emails q
            JOIN outreach.leads l ON l.id = q.lead_id
            JOIN outreach.campaigns c ON c.id = q.campaign_id
            CROSS JOIN LATERAL (
                SELECT coalesce(l.timezone, c.timezone) AS tz,
                       outreach.lead_country(l.custom, c.country) AS country,
                       (v_now AT TIME ZONE coalesce(l.timezone, c.timezone))::date AS today) z
            LEFT JOIN outreach.holidays h ON h.country = z.country AND h.day = z.today
            WHERE q.id = ANY (v_picked) AND q.lead_id = ANY (v_people)
        ), cand AS (
            SELECT id, lead_id, org, ord FROM cal WHERE closed IS NULL
        ), mine AS (
            SELECT * FROM cand WHERE org IS NULL OR org = ANY (v_orgs)
        ), touches AS (
            -- A touch: a campaign row of the person that is sending or sent (or unconfirmed: it
            -- may have gone out), by claimed_at.
            SELECT e.lead_id,
                   count(*) FILTER (WHERE e.claimed_at > v_now - interval '1 day') AS day_n,
                   min(e.claimed_at) FILTER (WHERE e.claimed_at > v_now - interval '1 day') AS day_first,
                   count(*) AS week_n, min(e.claimed_at) AS week_first
            FROM outreach.emails e
            WHERE v_caps AND e.lead_id IN (SELECT lead_id FROM mine) AND e.message_class = 'marketing'
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
              AND e.claimed_at > v_now - interval '7 days'
            GROUP BY e.lead_id
        ), person AS (
            SELECT m.*, coalesce(t.day_n, 0) AS day_n, t.day_first,
                   coalesce(t.week_n, 0) AS week_n, t.week_first,
                   row_number() OVER (PARTITION BY m.lead_id ORDER BY m.ord) AS lead_rn
            FROM mine m LEFT JOIN touches t USING (lead_id)
        ), org_people AS (
            -- The people of each organisation contacted in the last 24 hours (any campaign), by
            -- the organisation each row was claimed for (emails.org, index
            -- outreach_emails_org_claimed_idx: only that day's contacts are read).
            SELECT e.org, e.lead_id, min(e.claimed_at) AS first_at
            FROM outreach.emails e
            WHERE p_company_per_day IS NOT NULL
              AND e.org = ANY (v_orgs)
              AND e.claimed_at > v_now - interval '1 day'
              AND e.message_class = 'marketing'
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
            GROUP BY 1, 2
        ), org_counts AS (
            SELECT org, count(*) AS n, min(first_at) AS first_at FROM org_people GROUP BY org
        ), passed AS (
            SELECT p.*, (p.day_n + p.lead_rn <= v_day_cap AND p.week_n + p.lead_rn <= v_week_cap) AS person_ok,
                   EXISTS (SELECT 1 FROM org_people op
                           WHERE op.org = p.org AND op.lead_id = p.lead_id) AS org_known
            FROM person p
        ), new_people AS (
            -- Each person this claim would newly contact at an organisation, ranked in pick order.
            SELECT org, lead_id, dense_rank() OVER (PARTITION BY org ORDER BY first_ord, lead_id) AS org_rank
            FROM (SELECT org, lead_id, min(ord) AS first_ord FROM passed
                  WHERE person_ok AND org IS NOT NULL AND NOT org_known GROUP BY org, lead_id) s
        ), decided AS (
            SELECT p.id, p.org,
                   CASE WHEN NOT p.person_ok THEN false
                        WHEN p.org IS NULL OR p.org_known OR p_company_per_day IS NULL THEN true
                        ELSE coalesce(oc.n, 0) + np.org_rank <= v_org_cap END AS take,
                   CASE WHEN p.week_n + p.lead_rn > v_week_cap
                        THEN 'frequency cap: ' || p_person_per_week || ' a week'
                        WHEN p.day_n + p.lead_rn > v_day_cap
                        THEN 'frequency cap: ' || p_person_per_day || ' a day'
                        ELSE 'company cap: ' || p_company_per_day || ' people a day at ' || p.org
                   END AS reason,
                   CASE WHEN p.week_n + p.lead_rn > v_week_cap
                        THEN greatest(coalesce(p.week_first, v_now) + interval '7 days',
                                      coalesce(p.day_first, v_now) + interval '1 day')
                        WHEN p.day_n + p.lead_rn > v_day_cap
                        THEN coalesce(p.day_first, v_now) + interval '1 day'
                        ELSE coalesce(oc.first_at, v_now) + interval '1 day'
                   END AS hold_until
            FROM passed p
            LEFT JOIN org_counts oc ON oc.org = p.org
            LEFT JOIN new_people np ON np.org = p.org AND np.lead_id = p.lead_id
            UNION ALL
            SELECT k.id, NULL::text, false, k.closed,
                   outreach.next_open_slot(v_now, k.tz, k.send_days, k.window_start, k.window_end,
                                           k.country, k.blackout_dates)
            FROM cal k WHERE k.closed IS NOT NULL
        ), held AS (
            UPDATE outreach.emails e
            SET scheduled_for = d.hold_until, hold_reason = d.reason, updated_at = v_now
            FROM decided d
            WHERE e.id = d.id AND NOT d.take AND e.status IS NOT DISTINCT FROM 'queued'
            RETURNING e.id
        )
        UPDATE outreach.emails e
        SET status = 'sending', claim_token = p_claim_token, claimed_at = v_now,
            claimed_by = p_claimed_by, attempts = e.attempts + 1, updated_at = v_now,
            hold_reason = NULL, org = d.org
        FROM decided d
        WHERE e.id = d.id AND d.take AND e.status IS NOT DISTINCT FROM 'queued'
        RETURNING e.*;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        v_left := v_left - v_claimed;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outreach.claim_emails_v3 IS
    'the claim with the contact policy (person per 24 h and 7 days, company per 24 h) and the calendar (holidays, blackout dates, mailbox freeze); docs/explanation/contact-policy.md';

-- The key of another campaign whose sequence the lead is in now, or NULL. In a sequence (0142):
-- an active enrolment in an active or paused campaign, or one awaiting a second approval,
-- (other than p_campaign_id), none of whose emails ended unsent (failed but not unconfirmed,
-- cancelled, suppressed) and whose last step has not been sent. With p_before_at /
-- p_before_id only enrolments made before (enrolled_at, id) count: two 'wait' campaigns that
-- enrolled one person at once then wait for the earlier enrolment only, never for each other.
CREATE FUNCTION outreach.lead_in_other_sequence(p_lead_id bigint, p_campaign_id bigint,
                                                           p_before_at timestamptz DEFAULT NULL,
                                                           p_before_id bigint DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT c.key
    FROM outreach.enrollments en
    JOIN outreach.campaigns c ON c.id = en.campaign_id
    WHERE en.lead_id = p_lead_id AND en.campaign_id <> p_campaign_id AND en.status = 'active'
      AND (c.status IN ('active', 'paused')
           OR (c.status = 'awaiting_approval'
               AND EXISTS (SELECT 1 FROM outreach.emails s1
                           WHERE s1.lead_id = p_lead_id AND s1.campaign_id = c.id)))
      AND (p_before_at IS NULL OR (en.enrolled_at, en.id) < (p_before_at, p_before_id))
      AND NOT EXISTS (
          SELECT 1
          FROM outreach.sequence_steps st
          JOIN outreach.emails e ON e.step_id = st.id AND e.lead_id = p_lead_id
          WHERE st.campaign_id = c.id
            AND ((e.status IN ('cancelled', 'suppressed')
                  OR (e.status = 'failed' AND e.failure_kind IS DISTINCT FROM 'unconfirmed'))
                 OR (e.status = 'sent'
                     AND st.position = (SELECT max(s.position) FROM outreach.sequence_steps s
                                        WHERE s.campaign_id = c.id))))
    ORDER BY en.enrolled_at, en.id
    LIMIT 1
$$;

-- ---------------------------------------------------------------------------------------------
-- Transactional mail
-- ---------------------------------------------------------------------------------------------

-- Enqueue one transactional email in the caller's transaction, idempotently by delivery key:
-- the same key always returns its one row (created false on a replay); a key reused for another
-- recipient or template raises unique_violation. The recipient is normalised once; a suppressed
-- one gets a row too (status 'suppressed', outreach.is_suppressed(…, 'transactional')). NOTIFY
-- outreach_transactional wakes the LISTEN worker.
CREATE FUNCTION outreach.enqueue_transactional(
    p_delivery_key text, p_recipient text, p_template text,
    p_context jsonb DEFAULT '{}'::jsonb, p_mailbox text DEFAULT NULL)
RETURNS TABLE (email_id bigint, created boolean, status text, message_key uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_mailbox bigint;
    v_existing outreach.emails%ROWTYPE;
    v_suppressed boolean;
    -- The one normal form (see outreach.normalize_address): " jo@example.com\t" and
    -- "Jo@Example.COM" are one recipient, stored, compared and suppressed alike.
    v_recipient text := outreach.normalize_address(p_recipient);
BEGIN
    IF p_delivery_key IS NULL OR length(p_delivery_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'delivery key must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_recipient IS NULL OR v_recipient !~ '^[^@\s]+@[^@\s]+\.[^@\s]+$' THEN
        RAISE EXCEPTION 'recipient is not an email address' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Suppressions keep internationalised domains in Unicode (as leads are stored); an ACE
    -- (xn--) form could not match them, so it is refused rather than let through.
    IF split_part(v_recipient, '@', 2) ~* '(^|\.)xn--' THEN
        RAISE EXCEPTION 'recipient: write the domain in Unicode (IDNA-decoded), as outreach stores '
                        'suppressions: % ', split_part(v_recipient, '@', 2)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_template IS NULL OR p_template !~ '^[a-z0-9][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'template is not a template name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Replays first: the same key always returns its one row, whatever happened since.
    SELECT * INTO v_existing FROM outreach.emails e WHERE e.delivery_key = p_delivery_key;
    IF NOT FOUND THEN
        IF p_mailbox IS NULL THEN
            SELECT m.id INTO v_mailbox FROM outreach.mailboxes m WHERE m.transactional;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'no transactional mailbox: set "transactional: true" on one '
                                'mailbox of the mailbox file and run "outreach mailbox sync"'
                    USING ERRCODE = 'no_data_found';
            END IF;
        ELSE
            SELECT m.id INTO v_mailbox FROM outreach.mailboxes m WHERE m.address = lower(p_mailbox);
            IF NOT FOUND THEN
                RAISE EXCEPTION 'unknown mailbox %', p_mailbox USING ERRCODE = 'no_data_found';
            END IF;
        END IF;
        -- Queueing calls the one suppression function; a suppressed address gets a row too
        -- (status 'suppressed'), so a replay of the key gives the same answer.
        v_suppressed := outreach.is_suppressed(v_recipient, 'transactional');
        INSERT INTO outreach.emails AS e (message_class, delivery_key, recipient, template, context,
                                          mailbox_id, idempotency_key, status, scheduled_for)
        VALUES ('transactional', p_delivery_key, v_recipient, p_template,
                coalesce(p_context, '{}'::jsonb), v_mailbox,
                md5('outreach-transactional:' || p_delivery_key)::uuid,
                CASE WHEN v_suppressed THEN 'suppressed' ELSE 'queued' END::outreach.email_status,
                now())
        -- No conflict target: the delivery key and the idempotency key made from it are both
        -- UNIQUE, and a concurrent insert of the same key may hit either index first.
        ON CONFLICT DO NOTHING
        RETURNING e.id, true, e.status::text, e.idempotency_key
        INTO email_id, created, status, message_key;
        IF FOUND THEN
            PERFORM pg_notify('outreach_transactional', email_id::text);
            RETURN NEXT;
            RETURN;
        END IF;
        -- A concurrent transaction inserted the same key and committed first.
        SELECT * INTO v_existing FROM outreach.emails e WHERE e.delivery_key = p_delivery_key;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'delivery key %: its idempotency key is taken by another email', p_delivery_key
                USING ERRCODE = 'unique_violation';
        END IF;
    END IF;
    IF outreach.normalize_address(v_existing.recipient) IS DISTINCT FROM v_recipient
       OR v_existing.template IS DISTINCT FROM p_template THEN
        RAISE EXCEPTION 'delivery key % was already used for another message (email %)',
                        p_delivery_key, v_existing.id
            USING ERRCODE = 'unique_violation',
                  HINT = 'a delivery key names one message: make a new key for a new message';
    END IF;
    email_id := v_existing.id; created := false; status := v_existing.status::text;
    message_key := v_existing.idempotency_key;
    RETURN NEXT;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Campaigns
-- ---------------------------------------------------------------------------------------------

-- Finish every active or paused campaign (one, p_campaign_key; NULL: all) that
--   * is not fed by a source (a source may deliver new leads tomorrow),
--   * has at least one enrolment (an approved campaign waiting for its first import is not done),
--   * has no email row queued, sending, or failed as unconfirmed (a person still decides it),
--   * and has no enrolment that queue-due could still queue a step for, at any time: an active
--     enrolment of an unsuppressed lead with a step that has no email row yet and is the first
--     step or follows a sent one. That is email_queue_due's own condition without the clock and
--     without `requires` (a lead held for a missing field is queued once the field arrives, so it
--     keeps the campaign open). So an enrolment is done when it stopped (replied, stopped), its
--     lead is suppressed (unsubscribed, bounced, complained), its last step was sent, or its
--     latest step ended without being sent (failed, suppressed, cancelled): queue-due never
--     queues a step after one that was not sent.
-- Returns the finished campaigns. The candidates are locked first (FOR NO KEY UPDATE SKIP
-- LOCKED): an import holds its campaign's row from campaign_upsert to its commit, so a campaign
-- being imported into right now is skipped, and the UPDATE — a new statement, a new snapshot —
-- sees every enrolment committed by an import before the lock was granted. Skipped campaigns are
-- looked at again by the next queue-due.
CREATE FUNCTION outreach.finish_campaigns_v1(p_now timestamptz, p_campaign_key text)
RETURNS TABLE (campaign_id bigint, key text, finished_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    SELECT array_agg(c.id) INTO v_ids FROM (
        SELECT c.id FROM outreach.campaigns c
        WHERE c.status IN ('active', 'paused') AND NOT c.fed_by_source
          AND (p_campaign_key IS NULL OR c.key = p_campaign_key)
        ORDER BY c.id
        FOR NO KEY UPDATE SKIP LOCKED) c;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH done AS (
        UPDATE outreach.campaigns c
        SET status = 'finished', updated_at = coalesce(p_now, now())
        WHERE c.id = ANY (v_ids) AND c.status IN ('active', 'paused') AND NOT c.fed_by_source
          AND EXISTS (SELECT 1 FROM outreach.enrollments en WHERE en.campaign_id = c.id)
          AND NOT EXISTS (
              SELECT 1 FROM outreach.emails e
              WHERE e.campaign_id = c.id
                AND (e.status IN ('queued', 'sending')
                     OR (e.status = 'failed' AND e.failure_kind = 'unconfirmed')))
          AND NOT EXISTS (
              SELECT 1
              FROM outreach.enrollments en
              JOIN outreach.leads l ON l.id = en.lead_id
              JOIN outreach.sequence_steps st ON st.campaign_id = c.id
              LEFT JOIN outreach.sequence_steps prev
                     ON prev.campaign_id = c.id AND prev.position = st.position - 1
              LEFT JOIN outreach.emails pe ON pe.lead_id = en.lead_id AND pe.step_id = prev.id
              WHERE en.campaign_id = c.id AND en.status = 'active'
                AND (st.position = 1 OR pe.status = 'sent')
                AND NOT EXISTS (SELECT 1 FROM outreach.emails e
                                WHERE e.lead_id = en.lead_id AND e.step_id = st.id)
                AND NOT outreach.is_suppressed(l.email))
        RETURNING c.id, c.key, c.updated_at
    ), ev AS (
        INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
        SELECT d.id, 'finished', 'outreach',
               'every enrolment is done (last step sent, or the sequence stopped) and no email '
               'is queued, sending or unconfirmed', d.updated_at
        FROM done d
    )
    SELECT d.id, d.key, d.updated_at FROM done d ORDER BY d.id;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Enrolments
-- ---------------------------------------------------------------------------------------------

-- Stop one enrolment and cancel every queued step of it, in the caller's transaction (one
-- statement each, so a stop and its cancellations commit together or not at all).
--   p_status: 'stopped' (an operator) or 'replied' (a reply was read);
--   p_reason, p_by: why and who (both non-empty), kept on the enrolment.
-- Returns how many queued emails it cancelled (status 'cancelled'). Only status = 'queued' rows
-- are touched: a row 'sending' right now belongs to its sender, whose pre-send check re-reads the
-- enrolment (named query email_cancel_stopped) and cancels it before the handoff.
-- Stopping an enrolment that is no longer active keeps its first status, reason and time (like a
-- mailbox pause) and still cancels any queued step of it (a queue-due run that overlapped the
-- first stop may have inserted one). An unknown enrolment id raises no_data_found.
CREATE FUNCTION outreach.stop_enrollment(p_enrollment_id bigint, p_status text, p_reason text,
                                         p_by text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_en outreach.enrollments%ROWTYPE;
    v_cancelled integer;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('stopped', 'replied') THEN
        RAISE EXCEPTION 'an enrolment stops as ''stopped'' or ''replied'', not %', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF btrim(coalesce(p_reason, '')) = '' OR btrim(coalesce(p_by, '')) = '' THEN
        RAISE EXCEPTION 'stopping an enrolment needs who (by) and why (reason)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE outreach.enrollments en
    SET status = p_status, stopped_at = now(), stopped_by = btrim(p_by),
        stop_reason = btrim(p_reason)
    WHERE en.id = p_enrollment_id AND en.status = 'active'
    RETURNING * INTO v_en;
    IF NOT FOUND THEN
        SELECT * INTO v_en FROM outreach.enrollments en WHERE en.id = p_enrollment_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no enrolment %', p_enrollment_id USING ERRCODE = 'no_data_found';
        END IF;
    END IF;
    UPDATE outreach.emails e
    SET status = 'cancelled', updated_at = now(),
        last_error = format('enrolment %s %s by %s: %s', v_en.id, v_en.status, v_en.stopped_by,
                            v_en.stop_reason)
    WHERE e.lead_id = v_en.lead_id AND e.campaign_id = v_en.campaign_id AND e.status = 'queued';
    GET DIAGNOSTICS v_cancelled = ROW_COUNT;
    RETURN v_cancelled;
END
$$;

-- The fields of `fields` that lead `l` has blank, sorted, each once (an empty array: it has them
-- all). One place for the rule, used by queue-due and the report (sequence_steps.requires). One
-- expression over the four fields outreach_sequence_steps_requires_check allows, so the planner
-- inlines it into the query and reads the lead's columns (no call, no whole row: 0084).
CREATE FUNCTION outreach.lead_missing_fields(l outreach.leads, fields text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_remove(ARRAY[
        CASE WHEN 'company' = ANY (fields) AND coalesce(btrim(l.company), '') = ''
             THEN 'company' END,
        CASE WHEN 'first_name' = ANY (fields) AND coalesce(btrim(l.first_name), '') = ''
             THEN 'first_name' END,
        CASE WHEN 'last_name' = ANY (fields) AND coalesce(btrim(l.last_name), '') = ''
             THEN 'last_name' END,
        CASE WHEN 'title' = ANY (fields) AND coalesce(btrim(l.title), '') = ''
             THEN 'title' END], NULL)
$$;

-- The variant of (lead, step) for a row queued now: the first 32 bits of md5(campaign key / lead
-- id / step position), modulo the sum of the step's active weights, falls into one variant's
-- share of the cumulative weights (in file order). Deterministic: the same lead and step give
-- the same variant in every run and part of queue-due, and in a preview. NULL when the step has
-- no active variant.
CREATE FUNCTION outreach.step_variant_for(p_step_id bigint, p_lead_id bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT v.name
    FROM (SELECT sv.name, sum(sv.weight) OVER (ORDER BY sv.position, sv.name) AS upto,
                 sum(sv.weight) OVER () AS total
          FROM outreach.step_variants sv
          WHERE sv.step_id = p_step_id AND sv.active) v
    CROSS JOIN (SELECT c.key, st.position FROM outreach.sequence_steps st
                JOIN outreach.campaigns c ON c.id = st.campaign_id
                WHERE st.id = p_step_id) s
    WHERE mod(('x' || left(md5(s.key || '/' || p_lead_id || '/' || s.position), 8))::bit(32)::bigint,
              v.total) < v.upto
    ORDER BY v.upto
    LIMIT 1
$$;

-- ---------------------------------------------------------------------------------------------
-- Erasure
-- ---------------------------------------------------------------------------------------------

-- Does t mention any of needles (case-insensitive, as whole words: 0143)?
CREATE FUNCTION outreach.erasure_mentions(t text, needles text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t IS NOT NULL AND EXISTS (
        SELECT 1 FROM unnest(needles) n
        WHERE n <> '' AND strpos(lower(t), lower(n)) > 0
          AND t ~* ('\m' || regexp_replace(n, '([^[:alnum:]_[:space:]])', '\\\1', 'g') || '\M'))
$$;

-- t with every whole-word occurrence of each of needles (case-insensitive) replaced by '[erased]'.
CREATE FUNCTION outreach.erasure_clean(t text, needles text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN NOT outreach.erasure_mentions(t, needles) THEN t
        ELSE regexp_replace(t, '\m(' || (SELECT string_agg(regexp_replace(n, '([^[:alnum:]_[:space:]])',
                                                                           '\\\1', 'g'), '|')
                                          FROM unnest(needles) n WHERE n <> '') || ')\M',
                            '[erased]', 'gi')
    END
$$;

-- Erase one person (see the header): p_forms are the spellings of the address to find, the
-- normal form first (outreach.addresses.normalize_address; the hash is of it), then e.g. its
-- IDNA (xn--) spelling as inbound mail names it. p_actor: who (recorded); p_reason: why
-- (recorded, must not name the person). Returns the outreach.erasures row's id and counts.
-- Raises invalid_parameter_value without the key (outreach.erasure_key) or for a reason naming
-- the person or a mailbox's own address, object_in_use while an email to the person is being
-- sent (run it again when the send run is over). Running it again changes nothing more (counts 0).
CREATE FUNCTION outreach.erase_person_v1(p_forms text[], p_actor text, p_reason text,
                                         OUT erasure_id bigint, OUT counts jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    v_address text := p_forms[1];
    v_hash text;
    v_key bytea;
    v_lead outreach.leads%ROWTYPE;
    v_needles text[];
    v_emails bigint[];
    v_n integer;
    v_en record;
BEGIN
    IF v_address IS NULL OR btrim(v_address) = '' THEN
        RAISE EXCEPTION 'an erasure needs the address' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF btrim(coalesce(p_actor, '')) = '' OR btrim(coalesce(p_reason, '')) = '' THEN
        RAISE EXCEPTION 'an erasure needs who (by) and why (reason)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM outreach.mailboxes m WHERE lower(m.address) = ANY (p_forms)) THEN
        RAISE EXCEPTION 'that is one of your mailboxes, not a person to erase'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_key := outreach.erasure_key(true);
    INSERT INTO outreach.erasure_keys (id, fingerprint)
    VALUES (1, encode(outreach.hmac_sha256(v_key, 'outreach erasure key check'), 'hex'))
    ON CONFLICT (id) DO NOTHING;
    v_hash := outreach.erased_address_hash(v_address, true);  -- checks the fingerprint too
    PERFORM set_config('outreach.erasing', 'on', true);
    counts := '{}'::jsonb;

    SELECT * INTO v_lead FROM outreach.leads l WHERE l.email = ANY (p_forms) FOR UPDATE;
    v_needles := p_forms || ARRAY(SELECT x FROM unnest(ARRAY[
        btrim(v_lead.first_name || ' ' || v_lead.last_name), v_lead.first_name, v_lead.last_name]) x
        WHERE length(btrim(coalesce(x, ''))) >= 2);
    IF outreach.erasure_mentions(p_reason, v_needles) THEN
        RAISE EXCEPTION 'the reason must not name the person (it is kept)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The person's email rows, locked: a sender holding one ('sending') may still write its
    -- rendered subject into the send log, so the erasure waits for it (run again later).
    v_emails := ARRAY(SELECT e.id FROM outreach.emails e
                      WHERE (v_lead.id IS NOT NULL AND e.lead_id = v_lead.id)
                         OR (e.message_class = 'transactional' AND lower(e.recipient) = ANY (p_forms))
                      ORDER BY e.id FOR UPDATE);
    IF EXISTS (SELECT 1 FROM outreach.emails e WHERE e.id = ANY (v_emails) AND e.status = 'sending') THEN
        RAISE EXCEPTION 'an email to this person is being sent right now: run the erasure again '
                        'once the send run is over' USING ERRCODE = 'object_in_use';
    END IF;

    -- Suppressions: the address row becomes the keyed hash (its history follows), or a new hash
    -- row is written (its trigger records the suppress event).
    IF NOT EXISTS (SELECT 1 FROM outreach.suppressions s WHERE s.kind = 'address_hmac' AND s.value = v_hash) THEN
        UPDATE outreach.suppressions s SET kind = 'address_hmac', value = v_hash, reason = 'erased',
                                           source = 'erasure'
        WHERE s.id = (SELECT min(id) FROM outreach.suppressions
                      WHERE kind = 'address' AND value = ANY (p_forms));
        IF FOUND THEN
            INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason,
                                                     source, actor, note)
            SELECT 'suppress', s.id, s.kind, s.value, s.reason, s.source, btrim(p_actor), 'erased'
            FROM outreach.suppressions s WHERE s.kind = 'address_hmac' AND s.value = v_hash;
        ELSE
            PERFORM set_config('outreach.actor', btrim(p_actor), true);
            PERFORM set_config('outreach.note', 'erased', true);
            INSERT INTO outreach.suppressions (kind, value, reason, source)
            VALUES ('address_hmac', v_hash, 'erased', 'erasure');
        END IF;
        counts := counts || jsonb_build_object('suppressions', 1);
    END IF;
    -- An address row written again since an earlier erasure (a suppression list re-imported).
    PERFORM set_config('outreach.actor', btrim(p_actor), true);
    PERFORM set_config('outreach.note', 'erased: kept as its keyed hash', true);
    DELETE FROM outreach.suppressions s WHERE s.kind = 'address' AND s.value = ANY (p_forms);
    UPDATE outreach.suppression_events se
    SET kind = 'address_hmac', value = v_hash, note = outreach.erasure_clean(se.note, v_needles),
        source = CASE WHEN outreach.erasure_mentions(se.source, v_needles) THEN 'erasure' ELSE se.source END
    WHERE se.kind = 'address' AND se.value = ANY (p_forms);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('suppression_events', v_n);

    -- Emails: rows stay (one per lead and step; the send log's Message-ID, status, times).
    -- Queued rows are suppressed now: a transactional one has no recipient any more.
    UPDATE outreach.emails e
    SET status = CASE WHEN e.status = 'queued' THEN 'suppressed' ELSE e.status END,
        last_error = NULL, failure_diagnostic = NULL,
        late_accept_reply = CASE WHEN e.late_accepted_at IS NULL THEN NULL ELSE '[erased]' END,
        recipient = CASE WHEN e.message_class = 'transactional' THEN 'erased:' || e.id END,
        context = CASE WHEN e.message_class = 'transactional' THEN '{}'::jsonb END,
        updated_at = now()
    WHERE e.id = ANY (v_emails)
      AND (e.status = 'queued' OR e.last_error IS NOT NULL OR e.failure_diagnostic IS NOT NULL
           OR e.late_accept_reply IS DISTINCT FROM CASE WHEN e.late_accepted_at IS NULL THEN NULL ELSE '[erased]' END
           OR (e.message_class = 'transactional' AND e.recipient <> 'erased:' || e.id));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('emails', v_n);
    UPDATE outreach.send_log sl
    SET subject = NULL, smtp_reply = outreach.erasure_clean(sl.smtp_reply, v_needles)
    WHERE sl.email_id = ANY (v_emails)
      AND (sl.subject IS NOT NULL OR outreach.erasure_mentions(sl.smtp_reply, v_needles));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('send_log', v_n);
    UPDATE outreach.email_resolutions r
    SET note = outreach.erasure_clean(r.note, v_needles), evidence = NULL
    WHERE r.email_id = ANY (v_emails)
      AND (r.evidence IS NOT NULL OR outreach.erasure_mentions(r.note, v_needles));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('email_resolutions', v_n);
    UPDATE outreach.email_requeues q
    SET last_error = NULL, reason = outreach.erasure_clean(q.reason, v_needles)
    WHERE q.email_id = ANY (v_emails)
      AND (q.last_error IS NOT NULL OR outreach.erasure_mentions(q.reason, v_needles));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('email_requeues', v_n);

    -- Enrolments: active ones stop (their queued steps are cancelled); older reasons cleaned.
    v_n := 0;
    FOR v_en IN SELECT en.id FROM outreach.enrollments en
                WHERE en.lead_id = v_lead.id AND en.status = 'active' ORDER BY en.id LOOP
        PERFORM outreach.stop_enrollment(v_en.id, 'stopped', 'erased (GDPR Art. 17)', btrim(p_actor));
        v_n := v_n + 1;
    END LOOP;
    UPDATE outreach.enrollments en SET stop_reason = outreach.erasure_clean(en.stop_reason, v_needles)
    WHERE en.lead_id = v_lead.id AND outreach.erasure_mentions(en.stop_reason, v_needles);
    counts := counts || jsonb_build_object('enrollments', v_n);

    -- Inbound mail about the person: blanked as retention does (0125), the UNIQUE keys kept.
    UPDATE outreach.inbound_messages im
    SET from_address = '', subject = '', address = NULL, diagnostic = NULL, evidence = '',
        content_purged_at = coalesce(im.content_purged_at, now())
    WHERE ((v_lead.id IS NOT NULL AND im.lead_id = v_lead.id) OR im.email_id = ANY (v_emails)
           OR outreach.erasure_mentions(im.from_address, p_forms)
           OR outreach.erasure_mentions(im.address, p_forms)
           OR outreach.erasure_mentions(im.subject, v_needles)
           OR outreach.erasure_mentions(im.evidence, v_needles)
           OR outreach.erasure_mentions(im.diagnostic, v_needles))
      AND (im.from_address <> '' OR im.subject <> '' OR im.address IS NOT NULL
           OR im.diagnostic IS NOT NULL OR im.evidence <> '');
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('inbound_messages', v_n);
    UPDATE outreach.delivery_failures df SET address = 'erased:' || df.id, diagnostic = NULL
    WHERE (df.email_id = ANY (v_emails) OR lower(df.address) = ANY (p_forms)
           OR outreach.erasure_mentions(df.diagnostic, v_needles))
      AND df.address <> 'erased:' || df.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('delivery_failures', v_n);
    UPDATE outreach.esp_events ev SET recipient = 'erased:' || ev.id, diagnostic = NULL
    WHERE (ev.email_id = ANY (v_emails) OR lower(ev.recipient) = ANY (p_forms)
           OR outreach.erasure_mentions(ev.diagnostic, v_needles))
      AND ev.recipient <> 'erased:' || ev.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('esp_events', v_n);
    UPDATE outreach.test_sends t SET recipient = 'erased:' || t.id WHERE lower(t.recipient) = ANY (p_forms);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('test_sends', v_n);

    -- The event log names rows by id (0115); any value that names the person goes.
    UPDATE outreach.events ev
    SET payload = (SELECT coalesce(jsonb_object_agg(j.key, j.value), '{}'::jsonb)
                   FROM jsonb_each(ev.payload) j
                   WHERE NOT outreach.erasure_mentions(j.value::text, v_needles))
    WHERE outreach.erasure_mentions(ev.payload::text, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('events', v_n);
    UPDATE outreach.alerts a
    SET subject = outreach.erasure_clean(a.subject, v_needles), body = outreach.erasure_clean(a.body, v_needles)
    WHERE outreach.erasure_mentions(a.subject, v_needles) OR outreach.erasure_mentions(a.body, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('alerts', v_n);
    UPDATE outreach.campaign_events ce SET reason = outreach.erasure_clean(ce.reason, v_needles)
    WHERE outreach.erasure_mentions(ce.reason, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('campaign_events', v_n);
    UPDATE outreach.mailbox_events me SET reason = outreach.erasure_clean(me.reason, v_needles)
    WHERE outreach.erasure_mentions(me.reason, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('mailbox_events', v_n);

    -- Import problem lines that quote the person (the run's counts stay).
    UPDATE outreach.import_runs r
    SET problems = k.kept, problems_omitted = r.problems_omitted + jsonb_array_length(r.problems)
                                              - jsonb_array_length(k.kept)
    FROM (SELECT r2.id, (SELECT coalesce(jsonb_agg(p ORDER BY o), '[]'::jsonb)
                         FROM jsonb_array_elements(r2.problems) WITH ORDINALITY AS x(p, o)
                         WHERE NOT outreach.erasure_mentions(p::text, v_needles)) AS kept
          FROM outreach.import_runs r2
          WHERE outreach.erasure_mentions(r2.problems::text, v_needles)) k
    WHERE r.id = k.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('import_runs', v_n);
    DELETE FROM outreach.source_rows sr WHERE sr.lead_id = v_lead.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('source_rows', v_n);

    -- The lead: a tombstone (its id keeps the email rows, enrolments and events valid).
    UPDATE outreach.leads l
    SET email = 'erased:' || l.id, first_name = '', last_name = '', company = '', title = '',
        timezone = NULL, custom = '{}'::jsonb, updated_at = now()
    WHERE l.id = v_lead.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('leads', v_n);
    IF NOT counts ? 'suppressions' THEN
        counts := counts || jsonb_build_object('suppressions', 0);
    END IF;

    PERFORM set_config('outreach.erasing', '', true);
    INSERT INTO outreach.erasures (actor, reason, lead_id, counts)
    VALUES (btrim(p_actor), btrim(p_reason), v_lead.id, counts)
    RETURNING id INTO erasure_id;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Trigger functions (their triggers: §5)
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION outreach.emails_keep_idempotency_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outreach.emails.idempotency_key never changes (email %)', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;

CREATE FUNCTION outreach.emails_keep_variant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outreach.emails.variant never changes once queued (email %)', OLD.id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_emails_keep_variant';
END
$$;

-- The emails' transactional request never changes (0006), except by an erasure: the recipient
-- becomes 'erased:<id>' and the context '{}', the key, template and class stay.
CREATE FUNCTION outreach.emails_keep_transactional_request() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('outreach.erasing', true) = 'on'
       AND (NEW.delivery_key, NEW.template, NEW.message_class)
           IS NOT DISTINCT FROM (OLD.delivery_key, OLD.template, OLD.message_class)
       AND NEW.recipient = 'erased:' || OLD.id AND NEW.context = '{}'::jsonb THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the delivery key, recipient, template and context of email % never change', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;

-- Only a transaction that set outreach.resolution = 'operator' (sql/queries/resolutions.sql)
-- may change the status or failure kind of an unconfirmed row.
CREATE FUNCTION outreach.emails_guard_unconfirmed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('outreach.resolution', true), '') <> 'operator' THEN
        RAISE EXCEPTION 'email % is unconfirmed: only an operator resolution may change it '
                        '(outreach resolve / the outreach_resolve_unconfirmed DAG)', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

-- One row of outreach.emails left (OLD) or entered (NEW) what the daily cap counts, or moved to
-- another mailbox or quarter-hour while counted: move its unit in outreach.mailbox_claim_counts.
-- The triggers' WHEN clauses call it only then (a mark sent, a touch within the quarter-hour
-- never call it).
CREATE FUNCTION outreach.emails_count_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.claimed_at IS NOT NULL
       AND (OLD.status IN ('sending', 'sent') OR OLD.failure_kind IS NOT DISTINCT FROM 'unconfirmed') THEN
        UPDATE outreach.mailbox_claim_counts k SET claimed = k.claimed - 1
        WHERE k.mailbox_id = OLD.mailbox_id AND k.quarter = outreach.claim_quarter(OLD.claimed_at);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.claimed_at IS NOT NULL
       AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed') THEN
        UPDATE outreach.mailbox_claim_counts k SET claimed = k.claimed + 1
        WHERE k.mailbox_id = NEW.mailbox_id AND k.quarter = outreach.claim_quarter(NEW.claimed_at);
        IF NOT FOUND THEN  -- the quarter's first row (the upsert is the slower path)
            INSERT INTO outreach.mailbox_claim_counts AS k (mailbox_id, quarter, claimed)
            VALUES (NEW.mailbox_id, outreach.claim_quarter(NEW.claimed_at), 1)
            ON CONFLICT (mailbox_id, quarter) DO UPDATE SET claimed = k.claimed + 1;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- A test send counts toward its mailbox's daily cap like a claimed row (one unit in the
-- quarter-hour of accepted_at).
CREATE FUNCTION outreach.test_sends_count_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outreach.mailbox_claim_counts AS k (mailbox_id, quarter, claimed)
    VALUES (NEW.mailbox_id, outreach.claim_quarter(NEW.accepted_at), 1)
    ON CONFLICT (mailbox_id, quarter) DO UPDATE SET claimed = k.claimed + 1;
    RETURN NULL;
END
$$;

CREATE FUNCTION outreach.emails_truncate_claim_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outreach.mailbox_claim_counts;
    RETURN NULL;
END
$$;

-- A finished campaign takes no new enrolment: its leads would never be mailed (queue-due
-- queues only active campaigns) and nobody would be told. The import does not try (it reports
-- each such line, lead_stage_mark_campaign_finished); this refuses one made any other way. The
-- campaigns are locked FOR SHARE, so a concurrent finish (outreach.finish_campaigns_v1, FOR NO
-- KEY UPDATE SKIP LOCKED) skips them until this transaction ends, and a finish that committed
-- first is seen here (a locked row is re-read at its latest version).
CREATE FUNCTION outreach.enrollments_refuse_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key text;
BEGIN
    PERFORM FROM outreach.campaigns c
    WHERE c.id IN (SELECT n.campaign_id FROM new_enrollments n)
    ORDER BY c.id FOR SHARE;
    SELECT c.key INTO v_key FROM outreach.campaigns c
    WHERE c.id IN (SELECT n.campaign_id FROM new_enrollments n) AND c.status = 'finished'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'campaign % is finished: it takes no new enrolment', v_key
            USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_enrollments_campaign_open';
    END IF;
    RETURN NULL;
END
$$;

-- The allowed transitions of outreach.campaigns.status; any other change (an UPDATE by hand
-- from draft straight to active) is refused.
CREATE FUNCTION outreach.campaigns_check_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) NOT IN (('draft', 'awaiting_approval'),
                                        ('awaiting_approval', 'active'),
                                        ('awaiting_approval', 'draft'),
                                        ('active', 'paused'), ('paused', 'active'),
                                        ('active', 'awaiting_approval'),
                                        ('paused', 'awaiting_approval'),
                                        ('active', 'finished'), ('paused', 'finished')) THEN
        RAISE EXCEPTION 'campaign % cannot go from % to %', OLD.key, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_campaigns_status_check';
    END IF;
    RETURN NEW;
END
$$;

-- An approved campaign whose content changes needs a second approval (0127): see
-- outreach.campaigns.content_version.
CREATE FUNCTION outreach.campaigns_content_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status NOT IN ('active', 'paused') OR NEW.content_version IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.approved_content_version IS NULL THEN
        NEW.approved_content_version := NEW.content_version;
    ELSIF TG_OP = 'UPDATE' AND NEW.content_version <> NEW.approved_content_version THEN
        NEW.status := 'awaiting_approval';
        INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason)
        VALUES (NEW.id, 'submitted', 'outreach',
                format('content changed while %s (version %s, approved %s): a second approval '
                       'is needed', OLD.status, NEW.content_version,
                       NEW.approved_content_version));
    END IF;
    RETURN NEW;
END
$$;

-- Writes the outreach.suppression_events row of every insert and delete of a suppression.
CREATE FUNCTION outreach.suppressions_record_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason,
                                                 source, actor, note)
        VALUES ('suppress', NEW.id, NEW.kind, NEW.value, NEW.reason, NEW.source,
                nullif(current_setting('outreach.actor', true), ''),
                nullif(current_setting('outreach.note', true), ''));
        RETURN NEW;
    END IF;
    -- A removal without `outreach unsuppress` (psql, a script) still records the database role.
    INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason, source,
                                             actor, note)
    VALUES ('unsuppress', OLD.id, OLD.kind, OLD.value, OLD.reason, OLD.source,
            coalesce(nullif(current_setting('outreach.actor', true), ''), session_user::text),
            coalesce(nullif(current_setting('outreach.note', true), ''),
                     '(removed without outreach unsuppress)'));
    RETURN OLD;
END
$$;

-- The event log's writer (0115): one event per recorded effect; kinds and payloads in migration 0115.
CREATE FUNCTION outreach.record_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    e outreach.emails%ROWTYPE;
BEGIN
    IF TG_TABLE_NAME = 'send_log' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('sent', e.campaign_id, e.lead_id, NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'mailbox_id', NEW.mailbox_id,
                                   'source', NEW.source, 'send_log_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'inbound_messages' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES (CASE NEW.class WHEN 'reply' THEN 'replied' ELSE 'auto_replied' END,
                e.campaign_id, coalesce(NEW.lead_id, e.lead_id), NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'inbound_id', NEW.id,
                                   'mailbox_id', NEW.mailbox_id));
    ELSIF TG_TABLE_NAME = 'delivery_failures' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('bounced', e.campaign_id, e.lead_id, NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'reason', NEW.reason,
                                   'owner', NEW.owner, 'status', NEW.status,
                                   'mailbox_id', NEW.mailbox_id,
                                   'failure_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'suppression_events' THEN
        INSERT INTO outreach.events (kind, payload)
        VALUES (CASE WHEN NEW.action = 'unsuppress' THEN 'unsuppressed'
                     WHEN NEW.reason = 'unsubscribed' THEN 'unsubscribed'
                     WHEN NEW.reason = 'complained' THEN 'complained'
                     ELSE 'suppressed' END,
                jsonb_build_object('suppression_id', NEW.suppression_id,
                                   'suppression_kind', NEW.kind, 'source', NEW.source));
    ELSIF TG_TABLE_NAME = 'enrollments' THEN
        INSERT INTO outreach.events (kind, campaign_id, lead_id, payload)
        VALUES ('stopped', NEW.campaign_id, NEW.lead_id,
                jsonb_build_object('enrollment_id', NEW.id, 'status', NEW.status));
    ELSIF TG_TABLE_NAME = 'campaign_events' THEN
        INSERT INTO outreach.events (kind, campaign_id, payload)
        VALUES ('campaign_' || NEW.event, NEW.campaign_id,
                jsonb_build_object('campaign_event_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'mailbox_events' THEN
        INSERT INTO outreach.events (kind, payload)
        VALUES ('mailbox_' || NEW.event,
                jsonb_build_object('mailbox_id', NEW.mailbox_id, 'mailbox_event_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'email_resolutions' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('resolved', e.campaign_id, e.lead_id, NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'decision', NEW.decision,
                                   'resolution_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'emails' THEN
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('unconfirmed', NEW.campaign_id, NEW.lead_id, NEW.id,
                jsonb_build_object('step_id', NEW.step_id, 'mailbox_id', NEW.mailbox_id));
    END IF;
    RETURN NULL;
END;
$$;

-- ---------------------------------------------------------------------------------------------
-- Audit trail
-- ---------------------------------------------------------------------------------------------

-- Refuses every change to an audit row (UPDATE, DELETE) and TRUNCATE of the table.
CREATE FUNCTION outreach.audit_log_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outreach.audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- =============================================================================================
-- 5. Triggers
-- =============================================================================================

-- Only the allowed campaign transitions (outreach.campaigns_check_status).
CREATE TRIGGER outreach_campaigns_check_status
    BEFORE UPDATE OF status ON outreach.campaigns
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION outreach.campaigns_check_status();

-- A second approval when an active or paused campaign's content version changes.
CREATE TRIGGER outreach_campaigns_content_changed
    BEFORE INSERT OR UPDATE OF content_version ON outreach.campaigns
    FOR EACH ROW EXECUTE FUNCTION outreach.campaigns_content_changed();
-- A finished campaign takes no new enrolment (outreach.enrollments_refuse_finished).
CREATE TRIGGER outreach_enrollments_refuse_finished
    AFTER INSERT ON outreach.enrollments
    REFERENCING NEW TABLE AS new_enrollments
    FOR EACH STATEMENT EXECUTE FUNCTION outreach.enrollments_refuse_finished();

-- The idempotency key (the Message-ID) never changes.
CREATE TRIGGER outreach_emails_keep_idempotency_key
    BEFORE UPDATE OF idempotency_key ON outreach.emails
    FOR EACH ROW WHEN (OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key)
    EXECUTE FUNCTION outreach.emails_keep_idempotency_key();

-- What a transactional row was asked for (key, recipient, template, context, class) never changes.
CREATE TRIGGER outreach_emails_keep_variant
    BEFORE UPDATE ON outreach.emails
    FOR EACH ROW WHEN (OLD.variant IS DISTINCT FROM NEW.variant)
    EXECUTE FUNCTION outreach.emails_keep_variant();

CREATE TRIGGER outreach_emails_keep_transactional_request
    BEFORE UPDATE OF delivery_key, recipient, template, context, message_class ON outreach.emails
    FOR EACH ROW
    WHEN ((OLD.delivery_key, OLD.recipient, OLD.template, OLD.context, OLD.message_class)
          IS DISTINCT FROM (NEW.delivery_key, NEW.recipient, NEW.template, NEW.context, NEW.message_class))
    EXECUTE FUNCTION outreach.emails_keep_transactional_request();

-- An unconfirmed row changes only by an operator resolution.
CREATE TRIGGER outreach_emails_guard_unconfirmed
    BEFORE UPDATE ON outreach.emails
    FOR EACH ROW
    WHEN (OLD.failure_kind = 'unconfirmed'
          AND (NEW.status, NEW.failure_kind) IS DISTINCT FROM (OLD.status, OLD.failure_kind))
    EXECUTE FUNCTION outreach.emails_guard_unconfirmed();

-- What the daily cap counts follows every change of a row (outreach.mailbox_claim_counts).
CREATE TRIGGER outreach_emails_count_claims_insert
    AFTER INSERT ON outreach.emails
    FOR EACH ROW
    WHEN (NEW.claimed_at IS NOT NULL
          AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
    EXECUTE FUNCTION outreach.emails_count_claims();

CREATE TRIGGER outreach_emails_count_claims_update
    AFTER UPDATE ON outreach.emails
    FOR EACH ROW
    WHEN ((OLD.claimed_at IS NOT NULL
           AND (OLD.status IN ('sending', 'sent') OR OLD.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
              IS DISTINCT FROM
          (NEW.claimed_at IS NOT NULL
           AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
          OR ((NEW.claimed_at IS NOT NULL
               AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
              AND (OLD.mailbox_id <> NEW.mailbox_id
                   OR outreach.claim_quarter(OLD.claimed_at)
                      IS DISTINCT FROM outreach.claim_quarter(NEW.claimed_at))))
    EXECUTE FUNCTION outreach.emails_count_claims();

CREATE TRIGGER outreach_emails_count_claims_delete
    AFTER DELETE ON outreach.emails
    FOR EACH ROW
    WHEN (OLD.claimed_at IS NOT NULL
          AND (OLD.status IN ('sending', 'sent') OR OLD.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
    EXECUTE FUNCTION outreach.emails_count_claims();

CREATE TRIGGER outreach_emails_count_claims_truncate
    AFTER TRUNCATE ON outreach.emails
    FOR EACH STATEMENT EXECUTE FUNCTION outreach.emails_truncate_claim_counts();

CREATE TRIGGER outreach_test_sends_count_claims
    AFTER INSERT ON outreach.test_sends
    FOR EACH ROW EXECUTE FUNCTION outreach.test_sends_count_claims();

-- Every suppress and unsuppress is recorded, whoever makes it.
CREATE TRIGGER outreach_suppressions_record_event
    AFTER INSERT OR DELETE ON outreach.suppressions
    FOR EACH ROW EXECUTE FUNCTION outreach.suppressions_record_event();

-- The event log (0115): each effect writes its event in its own transaction.
CREATE TRIGGER outreach_send_log_record_event
    AFTER INSERT ON outreach.send_log
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

-- Only a reply or an auto-reply tied to an email: bounces come from delivery_failures,
-- complaints and unsubscribes from suppression_events (one event per effect, whoever saw it).
CREATE TRIGGER outreach_inbound_messages_record_event
    AFTER INSERT ON outreach.inbound_messages
    FOR EACH ROW WHEN (NEW.class IN ('reply', 'auto_reply')
                       AND (NEW.email_id IS NOT NULL OR NEW.lead_id IS NOT NULL))
    EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_delivery_failures_record_event
    AFTER INSERT ON outreach.delivery_failures
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_suppression_events_record_event
    AFTER INSERT ON outreach.suppression_events
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

-- A stop by an operator or a source; a reply's stop is the 'replied' event above.
CREATE TRIGGER outreach_enrollments_record_event
    AFTER UPDATE OF status ON outreach.enrollments
    FOR EACH ROW WHEN (OLD.status = 'active' AND NEW.status = 'stopped')
    EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_campaign_events_record_event
    AFTER INSERT ON outreach.campaign_events
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_mailbox_events_record_event
    AFTER INSERT ON outreach.mailbox_events
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_email_resolutions_record_event
    AFTER INSERT ON outreach.email_resolutions
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_emails_record_unconfirmed
    AFTER UPDATE OF status, failure_kind ON outreach.emails
    FOR EACH ROW WHEN (NEW.status = 'failed' AND NEW.failure_kind = 'unconfirmed'
                       AND OLD.failure_kind IS DISTINCT FROM 'unconfirmed')
    EXECUTE FUNCTION outreach.record_event();

-- The audit trail is append-only (0128).
CREATE TRIGGER outreach_audit_log_append_only
    BEFORE UPDATE OR DELETE ON outreach.audit_log
    FOR EACH ROW EXECUTE FUNCTION outreach.audit_log_refuse_change();

CREATE TRIGGER outreach_audit_log_no_truncate
    BEFORE TRUNCATE ON outreach.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION outreach.audit_log_refuse_change();

-- =============================================================================================
-- 6. Grants: none (see the header).
-- =============================================================================================
