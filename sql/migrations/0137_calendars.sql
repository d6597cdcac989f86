-- 0137: calendars (issue 25, item 4): public holidays per lead country, campaign blackout dates
-- and a mailbox freeze are outside every send window, and `business_days: true` counts a step's
-- delay_days in working days (Monday to Friday, not a holiday of the lead's country), in the
-- lead's time zone. Decided in SQL: email_queue_due schedules past them
-- (outreach.next_open_slot, outreach.add_working_days), and outreach.claim_emails_v3 (same
-- signature: CREATE OR REPLACE) holds a due row whose lead's local date is closed — it stays
-- queued, scheduled_for the next open slot, hold_reason 'holiday in DE' or 'blackout date
-- 2026-12-24' — and takes nothing for a mailbox frozen on its local date.

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

ALTER TABLE outreach.campaigns ADD COLUMN business_days boolean NOT NULL DEFAULT false;
ALTER TABLE outreach.campaigns ADD COLUMN country text;
ALTER TABLE outreach.campaigns ADD COLUMN blackout_dates date[] NOT NULL DEFAULT '{}';
ALTER TABLE outreach.campaigns ADD CONSTRAINT outreach_campaigns_country_check
    CHECK (country ~ '^[A-Z]{2}$');
COMMENT ON COLUMN outreach.campaigns.business_days IS
    'delay_days count working days (Mon-Fri, no holiday of the lead''s country)';

ALTER TABLE outreach.mailboxes ADD COLUMN freeze_from date;
ALTER TABLE outreach.mailboxes ADD COLUMN freeze_to date;
ALTER TABLE outreach.mailboxes ADD CONSTRAINT outreach_mailboxes_freeze_check
    CHECK ((freeze_from IS NULL) = (freeze_to IS NULL) AND freeze_from <= freeze_to);

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

-- The claim of 0132 with the calendar (same signature, so CREATE OR REPLACE): a marketing claim
-- no longer hands a claim without caps to claim_emails_v1 (v1 knows no calendar); without caps it
-- takes no advisory lock and counts no touch. The calendar part is the `cal` CTE and the rows
-- it holds (UNION ALL in `decided`), and the freeze test before the rounds.
CREATE OR REPLACE FUNCTION outreach.claim_emails_v3(p_message_class text, p_mailbox_id bigint,
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
            -- The people of each organisation contacted in the last 24 hours (any campaign).
            SELECT outreach.org_of(l2.email) AS org, e.lead_id, min(e.claimed_at) AS first_at
            FROM outreach.leads l2
            JOIN outreach.emails e ON e.lead_id = l2.id
            WHERE p_company_per_day IS NOT NULL
              AND outreach.email_domain(l2.email) IN (
                  SELECT unnest(v_orgs) UNION SELECT d.domain FROM outreach.org_domains d
                                              WHERE d.org = ANY (v_orgs))
              AND e.message_class = 'marketing'
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
              AND e.claimed_at > v_now - interval '1 day'
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
            SELECT p.id,
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
            SELECT k.id, false, k.closed,
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
            hold_reason = NULL
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
