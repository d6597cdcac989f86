-- 0146: the claim says what it held back (issue 28's newcomer walk: `claimed=0` with no reason).
--
-- claim_emails_v4 keeps its signature and its rules (CREATE OR REPLACE); at its end it sets the
-- transaction-local setting outreach.claim_held to {"held": {reason: rows}, "busy": rows}: the
-- rows this very call held back (the contact policy, the provider caps, the calendar) and those
-- it picked but could neither claim nor hold because another claimer had the person's or the
-- organisation's lock (still due). The caller reads it right after, in the same transaction
-- (outreach.claim.claim): exact under savepoints and concurrent claimers, where reading the
-- table afterwards was not. The held rows of a round are the picked rows now queued with
-- scheduled_for past now: only the round itself can have moved a picked (due) row there.

CREATE OR REPLACE FUNCTION outreach.claim_emails_v4(p_message_class text, p_mailbox_id bigint,
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
