-- 0132: the contact policy in one set-based claim (issue 25, items 1, 2 and 5):
-- outreach.claim_emails_v3 decides the per-person cap over a rolling 24 hours and 7 days (the
-- UTC-day count of v2 let one person get two emails seconds apart across midnight), the
-- per-company cap (at most N different people of one organisational domain contacted in any 24
-- hours, over all campaigns; free-mail domains are no company), and keeps picking while rows it
-- picked were held (v2 spent its limit on held rows, so a mailbox whose first due rows were all
-- over a cap claimed nothing that run).
--
-- Concurrency: the picked rows are locked (FOR NO KEY UPDATE SKIP LOCKED, as in v1); then, in a
-- statement of their own, a transaction-scoped try-advisory-lock per person and per company
-- (another claimer holding one: its rows are skipped this round, left queued and untouched);
-- then, in a later statement (a fresh READ COMMITTED snapshot, taken after the locks, so every
-- claim committed by an earlier holder of a lock is counted), the decision and both UPDATEs.
-- try never waits: claimers locking in different orders cannot deadlock.

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
CREATE INDEX outreach_org_domains_org_idx ON outreach.org_domains (org);

-- Free-mail providers (their users are not one company), after the best known consumer mailbox
-- providers' own domain lists (Google, Microsoft, Yahoo, Apple, AOL, Proton, Zoho, GMX/Web.de,
-- Yandex, Mail.ru, Tencent, NetEase, Orange, Libero, Seznam, Fastmail, Tutanota, Hey).
INSERT INTO outreach.org_domains (domain, free_mail) VALUES
    ('gmail.com', true), ('googlemail.com', true),
    ('outlook.com', true), ('hotmail.com', true), ('hotmail.co.uk', true), ('hotmail.fr', true),
    ('hotmail.de', true), ('hotmail.it', true), ('hotmail.es', true), ('live.com', true),
    ('live.co.uk', true), ('live.fr', true), ('live.de', true), ('msn.com', true),
    ('outlook.de', true), ('outlook.fr', true), ('outlook.es', true),
    ('yahoo.com', true), ('yahoo.co.uk', true), ('yahoo.fr', true), ('yahoo.de', true),
    ('yahoo.es', true), ('yahoo.it', true), ('yahoo.co.jp', true), ('yahoo.com.br', true),
    ('ymail.com', true), ('rocketmail.com', true),
    ('icloud.com', true), ('me.com', true), ('mac.com', true),
    ('aol.com', true), ('aim.com', true),
    ('proton.me', true), ('protonmail.com', true), ('pm.me', true),
    ('zoho.com', true), ('zohomail.com', true),
    ('gmx.com', true), ('gmx.de', true), ('gmx.net', true), ('gmx.at', true), ('web.de', true),
    ('yandex.com', true), ('yandex.ru', true), ('mail.ru', true),
    ('qq.com', true), ('163.com', true), ('126.com', true),
    ('orange.fr', true), ('wanadoo.fr', true), ('libero.it', true), ('seznam.cz', true),
    ('fastmail.com', true), ('tutanota.com', true), ('tuta.io', true), ('hey.com', true),
    ('mail.com', true);

-- The domain part of a stored (normalised) address; indexed so the company count finds an
-- organisation's leads without reading every lead.
CREATE FUNCTION outreach.email_domain(p_email text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT lower(split_part(p_email, '@', 2)) $$;
CREATE INDEX outreach_leads_domain_idx ON outreach.leads (outreach.email_domain(email));

-- The organisation of an address: its mapped org, NULL for free mail, else its own domain.
CREATE FUNCTION outreach.org_of(p_email text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN d.domain IS NULL THEN outreach.email_domain(p_email)
                WHEN d.free_mail THEN NULL ELSE d.org END
    FROM (SELECT outreach.email_domain(p_email) AS domain) e
    LEFT JOIN outreach.org_domains d ON d.domain = e.domain
$$;

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
BEGIN
    IF p_message_class <> 'marketing'
       OR (p_person_per_day IS NULL AND p_person_per_week IS NULL AND p_company_per_day IS NULL) THEN
        RETURN QUERY SELECT * FROM outreach.claim_emails_v1(p_message_class, p_mailbox_id, p_limit,
                                                            p_claim_token, p_claimed_by, v_now);
        RETURN;
    END IF;
    IF p_person_per_day < 1 OR p_person_per_week < 1 OR p_company_per_day < 1 THEN
        RAISE EXCEPTION 'contact caps must be at least 1 (or NULL: off), got % a day, % a week, % people of a company a day',
                        p_person_per_day, p_person_per_week, p_company_per_day
            USING ERRCODE = 'invalid_parameter_value';
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
            WHERE pg_try_advisory_xact_lock(hashtextextended('outreach.person:' || p.lead_id, 0)));
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
        WITH cand AS (
            SELECT q.id, q.lead_id, outreach.org_of(l.email) AS org,
                   row_number() OVER (ORDER BY q.scheduled_for, q.id) AS ord
            FROM outreach.emails q JOIN outreach.leads l ON l.id = q.lead_id
            WHERE q.id = ANY (v_picked) AND q.lead_id = ANY (v_people)
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
            WHERE e.lead_id IN (SELECT lead_id FROM mine) AND e.message_class = 'marketing'
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
    'the claim with the contact policy (person per 24 h and 7 days, company per 24 h); docs/explanation/contact-policy.md';
