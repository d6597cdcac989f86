-- Enrolments: stopping one (an operator, a reply) and the pre-send check that honours a stop.
-- The stop itself is the SQL function outreach.stop_enrollment (migration 0012): it stops the
-- enrolment and cancels every queued step of it in the caller's transaction.

-- name: enrollment_find
-- The enrolment of a lead (normalised address) in a campaign (key), locked for the rest of the
-- transaction so that what a stop reports (changed or already stopped) is what it did.
SELECT en.id, en.status, en.stopped_at, en.stopped_by, en.stop_reason, en.lead_id,
       en.campaign_id, l.email, c.key AS campaign_key
FROM outreach.enrollments en
JOIN outreach.leads l ON l.id = en.lead_id
JOIN outreach.campaigns c ON c.id = en.campaign_id
WHERE l.email = %(email)s AND c.key = %(campaign_key)s
FOR UPDATE OF en;

-- name: enrollment_stop
-- Stop one enrolment ('stopped' or 'replied') and cancel its queued steps; returns how many.
SELECT outreach.stop_enrollment(%(enrollment_id)s, %(status)s, %(reason)s, %(by)s) AS cancelled;

-- name: enrollment_active_for_lead
-- A lead's active enrolments, in one campaign (%(campaign_id)s) or in those a mailbox sends
-- (%(mailbox_id)s), or all (both NULL), with the campaign's inbound rules.
SELECT en.id, en.campaign_id, en.lead_id, en.mailbox_id, c.key AS campaign_key,
       c.stop_on_auto_reply, c.stop_on_domain_reply
FROM outreach.enrollments en
JOIN outreach.campaigns c ON c.id = en.campaign_id
WHERE en.lead_id = %(lead_id)s AND en.status = 'active'
  AND (%(campaign_id)s::bigint IS NULL OR en.campaign_id = %(campaign_id)s::bigint)
  AND (%(mailbox_id)s::bigint IS NULL OR en.mailbox_id = %(mailbox_id)s::bigint)
ORDER BY en.id;

-- name: enrollment_active_same_domain
-- Every other active enrolment of a campaign whose lead has an address at %(domain)s
-- (stop_on_domain_reply: a colleague answered).
SELECT en.id, en.lead_id, l.email
FROM outreach.enrollments en
JOIN outreach.leads l ON l.id = en.lead_id
WHERE en.campaign_id = %(campaign_id)s AND en.status = 'active' AND en.lead_id <> %(lead_id)s
  AND split_part(l.email, '@', 2) = %(domain)s
ORDER BY en.id;

-- name: enrollment_insert_staged
-- Enrol every staged, unsuppressed lead; a lead already enrolled keeps its enrolment (and its
-- mailbox, so follow-ups come from the same sender). Mailboxes are assigned round-robin by lead id.
-- A campaign with overlap 'skip' enrols a lead who is in another campaign's sequence as stopped,
-- by 'contact policy', with the other campaign in the reason (outreach.lead_in_other_sequence,
-- migration 0134). A finished campaign enrols nothing (its lines were marked by
-- lead_stage_mark_campaign_finished; trigger outreach_enrollments_refuse_finished is the
-- backstop). Returns the count of new active enrolments and of those skipped.
-- provider_match (0145; docs/explanation/contact-policy.md "Provider match"): each mailbox takes
-- its share of the campaign's active enrolments, ceil((enrolled + new) / mailboxes), as the
-- round robin would; a new lead whose provider (outreach.email_provider: the MX cache, never a
-- lookup; 'other' matches nothing) is a mailbox's own (mailboxes.provider, else its domain's
-- cached provider) goes to such a mailbox while it is active, not frozen today and within its
-- share (the leads of a provider, by lead id, laid over those mailboxes' room left, by id); the
-- other new leads fill the room left of every mailbox the same way, and a lead past all room
-- (a mailbox over its share) takes the round robin. Off, the provider CTEs are never run (a
-- one-time filter). Concurrency: campaign_upsert, earlier in the import's transaction, locks the
-- campaign row until it commits, so two imports of a campaign count each other's enrolments.
WITH mbs AS (
    SELECT array_agg(mailbox_id ORDER BY mailbox_id) AS ids
    FROM outreach.campaign_mailboxes WHERE campaign_id = %(campaign_id)s
), camp AS (
    SELECT overlap, provider_match, coalesce(%(now)s::timestamptz, now()) AS now
    FROM outreach.campaigns WHERE id = %(campaign_id)s
), cand AS MATERIALIZED (
    -- The leads this statement enrols active (provider_match only), with their provider.
    SELECT l.id AS lead_id, p.provider
    FROM outreach_lead_stage s
    JOIN outreach.leads l ON l.email = s.email
    CROSS JOIN camp
    CROSS JOIN LATERAL outreach.email_provider(l.email, camp.now) p
    WHERE camp.provider_match
      AND s.email IS NOT NULL AND s.duplicate_of IS NULL AND NOT s.suppressed
      AND NOT EXISTS (SELECT 1 FROM outreach.enrollments en
                      WHERE en.campaign_id = %(campaign_id)s AND en.lead_id = l.id)
      -- A lead overlap skip enrols stopped takes no share (it would use a matched mailbox's
      -- room up; it gets the round robin). The function runs twice for such a campaign.
      AND (camp.overlap <> 'skip'
           OR outreach.lead_in_other_sequence(l.id, %(campaign_id)s) IS NULL)
), pool AS MATERIALIZED (
    -- Each mailbox of the campaign: its own provider, whether it may take a matched lead, and
    -- its room left within its share.
    SELECT cm.mailbox_id, coalesce(m.provider, mp.provider) AS provider,
           m.status = 'active'
           AND NOT coalesce((camp.now AT TIME ZONE m.timezone)::date
                            BETWEEN m.freeze_from AND m.freeze_to, false) AS open,
           greatest(ceil((tot.enrolled + tot.new)::numeric / tot.boxes) - coalesce(h.n, 0), 0)
               AS room
    FROM outreach.campaign_mailboxes cm
    JOIN outreach.mailboxes m ON m.id = cm.mailbox_id
    CROSS JOIN camp
    CROSS JOIN LATERAL outreach.email_provider(m.address, camp.now) mp
    CROSS JOIN (SELECT (SELECT count(*) FROM outreach.enrollments
                        WHERE campaign_id = %(campaign_id)s AND status = 'active') AS enrolled,
                       (SELECT count(*) FROM cand) AS new,
                       (SELECT count(*) FROM outreach.campaign_mailboxes
                        WHERE campaign_id = %(campaign_id)s) AS boxes) tot
    LEFT JOIN (SELECT mailbox_id, count(*) AS n FROM outreach.enrollments
               WHERE campaign_id = %(campaign_id)s AND status = 'active'
               GROUP BY mailbox_id) h ON h.mailbox_id = cm.mailbox_id
    WHERE cm.campaign_id = %(campaign_id)s AND camp.provider_match
), slots AS (
    -- The open mailboxes of each provider, their room as consecutive ranges of ranks.
    SELECT mailbox_id, provider, room,
           sum(room) OVER (PARTITION BY provider ORDER BY mailbox_id) AS upto
    FROM pool WHERE open AND provider <> 'other'
), matched AS MATERIALIZED (
    SELECT r.lead_id, s.mailbox_id
    FROM (SELECT lead_id, provider, row_number() OVER (PARTITION BY provider ORDER BY lead_id) AS rk
          FROM cand WHERE provider <> 'other') r
    JOIN slots s ON s.provider = r.provider AND r.rk > s.upto - s.room AND r.rk <= s.upto
), rest AS (
    -- Every mailbox's room after the matched leads, as consecutive ranges of ranks.
    SELECT p.mailbox_id, p.room - coalesce(t.n, 0) AS room,
           sum(p.room - coalesce(t.n, 0)) OVER (ORDER BY p.mailbox_id) AS upto
    FROM pool p
    LEFT JOIN (SELECT mailbox_id, count(*) AS n FROM matched GROUP BY mailbox_id) t
           ON t.mailbox_id = p.mailbox_id
), filled AS (
    SELECT u.lead_id, r.mailbox_id
    FROM (SELECT c.lead_id, row_number() OVER (ORDER BY c.lead_id) AS rk
          FROM cand c WHERE NOT EXISTS (SELECT 1 FROM matched mt WHERE mt.lead_id = c.lead_id)) u
    JOIN rest r ON u.rk > r.upto - r.room AND u.rk <= r.upto
), assigned AS (
    SELECT lead_id, mailbox_id FROM matched
    UNION ALL
    SELECT lead_id, mailbox_id FROM filled
), enrolled AS (
    INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id, enrolled_at, status,
                                      stopped_at, stopped_by, stop_reason)
    SELECT %(campaign_id)s, l.id,
           coalesce(a.mailbox_id, mbs.ids[1 + (l.id %% cardinality(mbs.ids))]),
           coalesce(%(now)s::timestamptz, now()),
           CASE WHEN o.other IS NULL THEN 'active' ELSE 'stopped' END,
           CASE WHEN o.other IS NOT NULL THEN coalesce(%(now)s::timestamptz, now()) END,
           CASE WHEN o.other IS NOT NULL THEN 'contact policy' END,
           'overlap: skip, in the sequence of campaign ' || o.other
    FROM outreach_lead_stage s
    JOIN outreach.leads l ON l.email = s.email
    CROSS JOIN mbs
    CROSS JOIN camp
    -- The CASE, not a WHERE in the lateral subquery: the planner pulled that subquery up and
    -- ran the function for every lead whatever the overlap setting (~1.4 ms a lead).
    CROSS JOIN LATERAL (SELECT CASE WHEN camp.overlap = 'skip'
                                    THEN outreach.lead_in_other_sequence(l.id, %(campaign_id)s)
                               END AS other) o
    LEFT JOIN assigned a ON a.lead_id = l.id
    WHERE s.email IS NOT NULL AND s.duplicate_of IS NULL AND NOT s.suppressed
      AND NOT EXISTS (SELECT 1 FROM outreach.campaigns c
                      WHERE c.id = %(campaign_id)s AND c.status = 'finished')
    ON CONFLICT ON CONSTRAINT outreach_enrollments_campaign_lead_key DO NOTHING
    RETURNING status
)
SELECT count(*) FILTER (WHERE status = 'active') AS enrolled,
       count(*) FILTER (WHERE status = 'stopped') AS skipped
FROM enrolled;
