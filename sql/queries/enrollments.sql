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
WITH mbs AS (
    SELECT array_agg(mailbox_id ORDER BY mailbox_id) AS ids
    FROM outreach.campaign_mailboxes WHERE campaign_id = %(campaign_id)s
), camp AS (
    SELECT overlap FROM outreach.campaigns WHERE id = %(campaign_id)s
), enrolled AS (
    INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id, enrolled_at, status,
                                      stopped_at, stopped_by, stop_reason)
    SELECT %(campaign_id)s, l.id, mbs.ids[1 + (l.id %% cardinality(mbs.ids))],
           coalesce(%(now)s::timestamptz, now()),
           CASE WHEN o.other IS NULL THEN 'active' ELSE 'stopped' END,
           CASE WHEN o.other IS NOT NULL THEN coalesce(%(now)s::timestamptz, now()) END,
           CASE WHEN o.other IS NOT NULL THEN 'contact policy' END,
           'overlap: skip, in the sequence of campaign ' || o.other
    FROM outreach_lead_stage s
    JOIN outreach.leads l ON l.email = s.email
    CROSS JOIN mbs
    CROSS JOIN camp
    LEFT JOIN LATERAL (SELECT outreach.lead_in_other_sequence(l.id, %(campaign_id)s) AS other
                       WHERE camp.overlap = 'skip') o ON true
    WHERE s.email IS NOT NULL AND s.duplicate_of IS NULL AND NOT s.suppressed
      AND NOT EXISTS (SELECT 1 FROM outreach.campaigns c
                      WHERE c.id = %(campaign_id)s AND c.status = 'finished')
    ON CONFLICT ON CONSTRAINT outreach_enrollments_campaign_lead_key DO NOTHING
    RETURNING status
)
SELECT count(*) FILTER (WHERE status = 'active') AS enrolled,
       count(*) FILTER (WHERE status = 'stopped') AS skipped
FROM enrolled;
