-- 0001: the initial outreach schema.
--
-- Every object lives in the `outreach` schema; constraints carry explicit names because the
-- Python side maps database errors by constraint name (outreach.db.CONSTRAINTS).

CREATE SCHEMA IF NOT EXISTS outreach;

-- ---------------------------------------------------------------------------------------------
-- Types
-- ---------------------------------------------------------------------------------------------

CREATE TYPE outreach.email_status AS ENUM (
    'queued',     -- waiting for scheduled_for; any sender may claim it
    'sending',    -- claimed by exactly one sender (claim_token); the SMTP handoff may be under way
    'sent',       -- the SMTP server accepted it (2xx to the end of DATA); send_log has its entry
    'failed',     -- final; failure_kind says why ('unconfirmed' needs a person: check Sent Items)
    'suppressed'  -- final; the address was suppressed before the handoff
);

-- ---------------------------------------------------------------------------------------------
-- Mailboxes, campaigns, sequence steps
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.mailboxes (
    id               bigserial PRIMARY KEY,
    address          text NOT NULL,
    display_name     text NOT NULL DEFAULT '',
    smtp_conn_id     text NOT NULL,            -- Airflow connection id: secrets never live here
    timezone         text NOT NULL DEFAULT 'UTC',
    daily_cap        integer NOT NULL DEFAULT 50,
    warmup_start     date,                     -- NULL: no warm-up ramp (an established mailbox)
    warmup_initial   integer NOT NULL DEFAULT 10,
    warmup_days      integer NOT NULL DEFAULT 7,
    warmup_increment integer NOT NULL DEFAULT 5,
    status           text NOT NULL DEFAULT 'active',
    paused_reason    text,
    paused_at        timestamptz,
    paused_by        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_mailboxes_address_key UNIQUE (address),
    CONSTRAINT outreach_mailboxes_status_check CHECK (status IN ('active', 'paused')),
    CONSTRAINT outreach_mailboxes_cap_check CHECK (daily_cap > 0 AND warmup_initial > 0
        AND warmup_days >= 0 AND warmup_increment >= 0)
);

CREATE TABLE outreach.campaigns (
    id           bigserial PRIMARY KEY,
    key          text NOT NULL,               -- stable slug from the campaign file
    name         text NOT NULL,
    timezone     text NOT NULL,
    send_days    integer[] NOT NULL,          -- ISO weekdays, 1 = Monday … 7 = Sunday
    window_start time NOT NULL,
    window_end   time NOT NULL,               -- exclusive; '24:00' means end of day
    source_file  text NOT NULL,
    status       text NOT NULL DEFAULT 'active',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_campaigns_key_key UNIQUE (key),
    CONSTRAINT outreach_campaigns_status_check CHECK (status IN ('active', 'paused')),
    CONSTRAINT outreach_campaigns_window_check CHECK (window_start < window_end)
);

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
    CONSTRAINT outreach_sequence_steps_position_key UNIQUE (campaign_id, position),
    CONSTRAINT outreach_sequence_steps_position_check CHECK (position >= 1),
    CONSTRAINT outreach_sequence_steps_delay_check CHECK (delay_days >= 0)
);

-- ---------------------------------------------------------------------------------------------
-- Leads and enrolments
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.leads (
    id         bigserial PRIMARY KEY,
    email      text NOT NULL,                 -- normalised: see outreach.leads.normalise_address
    first_name text NOT NULL DEFAULT '',
    last_name  text NOT NULL DEFAULT '',
    company    text NOT NULL DEFAULT '',
    title      text NOT NULL DEFAULT '',
    timezone   text,                          -- NULL: the campaign's time zone applies
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_leads_email_key UNIQUE (email)
);

CREATE TABLE outreach.enrollments (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    lead_id     bigint NOT NULL REFERENCES outreach.leads (id),
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    status      text NOT NULL DEFAULT 'active',
    enrolled_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_enrollments_campaign_lead_key UNIQUE (campaign_id, lead_id),
    CONSTRAINT outreach_enrollments_status_check CHECK (status IN ('active', 'stopped'))
);

-- ---------------------------------------------------------------------------------------------
-- Suppressions and the one function that decides
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.suppressions (
    id         bigserial PRIMARY KEY,
    kind       text NOT NULL,                 -- 'address' or 'domain'
    value      text NOT NULL,                 -- lower-case address, or lower-case domain
    reason     text NOT NULL,
    source     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_suppressions_value_key UNIQUE (kind, value),
    CONSTRAINT outreach_suppressions_kind_check CHECK (kind IN ('address', 'domain')),
    CONSTRAINT outreach_suppressions_reason_check CHECK (reason IN
        ('unsubscribed', 'bounced', 'complained', 'manual', 'do-not-contact'))
);

-- The only place where "may we write to this address?" is decided. Lead import, queueing and the
-- pre-send check all call it, so changing this function changes all three at once.
CREATE FUNCTION outreach.is_suppressed(address text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT EXISTS (
        SELECT 1 FROM outreach.suppressions s
        WHERE (s.kind = 'address' AND s.value = lower(address))
           OR (s.kind = 'domain' AND s.value = lower(split_part(address, '@', 2)))
    )
$$;

-- ---------------------------------------------------------------------------------------------
-- Emails: one row per (lead, sequence step)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.emails (
    id              bigserial PRIMARY KEY,
    lead_id         bigint NOT NULL REFERENCES outreach.leads (id),
    step_id         bigint NOT NULL REFERENCES outreach.sequence_steps (id),
    campaign_id     bigint NOT NULL REFERENCES outreach.campaigns (id),
    mailbox_id      bigint NOT NULL REFERENCES outreach.mailboxes (id),
    status          outreach.email_status NOT NULL DEFAULT 'queued',
    -- Fixed at insert, never changed (trigger below): it becomes the Message-ID, so every attempt
    -- of this row carries the same Message-ID and a receiver can tell a repeat.
    idempotency_key uuid NOT NULL DEFAULT gen_random_uuid(),
    scheduled_for   timestamptz NOT NULL,     -- UTC; not claimed before this
    attempts        integer NOT NULL DEFAULT 0,
    -- A random token per claim: a timestamp is not a lock identity. Every transition of a claimed
    -- row requires status = 'sending' AND this token, so a sender whose claim was taken away (the
    -- reaper, an operator) can never overwrite the outcome.
    claim_token     uuid,
    claimed_at      timestamptz,
    claimed_by      text,
    failure_kind    text,                     -- set with status 'failed'
    last_error      text,                     -- stage, reply code and text of the last problem
    sent_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_emails_lead_step_key UNIQUE (lead_id, step_id),
    CONSTRAINT outreach_emails_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT outreach_emails_attempts_check CHECK (attempts >= 0),
    CONSTRAINT outreach_emails_failure_kind_check CHECK (
        (status = 'failed') = (failure_kind IS NOT NULL)
        AND failure_kind IN ('permanent', 'retries_exhausted', 'unconfirmed', 'render', 'operator')
    ),
    CONSTRAINT outreach_emails_claim_check CHECK (
        status <> 'sending' OR (claim_token IS NOT NULL AND claimed_at IS NOT NULL)
    )
);

-- Claim order: due rows of a mailbox, oldest first.
CREATE INDEX outreach_emails_queued_idx ON outreach.emails (mailbox_id, scheduled_for, id)
    WHERE status = 'queued';
-- The reaper and daily-cap counts look at in-flight and recent rows only.
CREATE INDEX outreach_emails_sending_idx ON outreach.emails (claimed_at) WHERE status = 'sending';
CREATE INDEX outreach_emails_mailbox_claimed_idx ON outreach.emails (mailbox_id, claimed_at);

CREATE FUNCTION outreach.emails_keep_idempotency_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outreach.emails.idempotency_key never changes (email %)', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER outreach_emails_keep_idempotency_key
    BEFORE UPDATE OF idempotency_key ON outreach.emails
    FOR EACH ROW WHEN (OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key)
    EXECUTE FUNCTION outreach.emails_keep_idempotency_key();

-- ---------------------------------------------------------------------------------------------
-- Send log: exactly one entry per email row, written only after the SMTP server accepted it
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.send_log (
    id          bigserial PRIMARY KEY,
    email_id    bigint NOT NULL REFERENCES outreach.emails (id),
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    message_id  text NOT NULL,
    smtp_reply  text NOT NULL,                -- the server's reply to the end of DATA
    source      text NOT NULL DEFAULT 'smtp', -- 'smtp', or 'operator' when a person confirmed it
    accepted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_send_log_email_key UNIQUE (email_id),
    CONSTRAINT outreach_send_log_message_id_key UNIQUE (message_id),
    CONSTRAINT outreach_send_log_source_check CHECK (source IN ('smtp', 'operator'))
);
CREATE INDEX outreach_send_log_mailbox_idx ON outreach.send_log (mailbox_id, accepted_at);

-- ---------------------------------------------------------------------------------------------
-- Import runs: what each import did, for the report and for analysts
-- ---------------------------------------------------------------------------------------------

CREATE TABLE outreach.import_runs (
    id           bigserial PRIMARY KEY,
    kind         text NOT NULL,                -- 'leads' or 'suppressions'
    file         text NOT NULL,
    campaign_key text,
    rows_total   integer NOT NULL,
    imported     integer NOT NULL,             -- new leads (or new suppressions)
    updated      integer NOT NULL,
    duplicate    integer NOT NULL,             -- already known, or repeated within the file
    invalid      integer NOT NULL,
    suppressed   integer NOT NULL,
    enrolled     integer NOT NULL,
    problems     jsonb NOT NULL DEFAULT '[]',  -- [{"line": 12, "field": "email", "reason": "…"}]
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_import_runs_kind_check CHECK (kind IN ('leads', 'suppressions'))
);

-- ---------------------------------------------------------------------------------------------
-- Send windows
-- ---------------------------------------------------------------------------------------------

-- The first moment at or after `after` that lies inside the window [win_start, win_end) of one of
-- `days` (ISO weekdays) in time zone `tz`. Local times are turned into instants by PostgreSQL's
-- time zone rules, so DST changes are handled: a window opening inside a spring-forward gap opens
-- at the first valid instant after it.
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

-- How many emails a mailbox may start on the local day that contains `at`: the warm-up ramp
-- (warmup_initial a day for warmup_days days, then + warmup_increment a day) capped by daily_cap.
-- Default ramp: at most 10 a day in the first week (Gmail and Yahoo sender guidance on warming up).
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
