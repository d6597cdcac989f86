-- Campaigns, their sequence steps and mailboxes: written when a reviewed campaign file is synced.

-- name: campaign_upsert
-- %(status)s (the file's `status`: draft or active) applies only when the campaign is created: a
-- later sync never changes the status (approval, a pause are decided in the database), except
-- that another %(content_version)s of an active or paused campaign sends it back to
-- awaiting_approval (trigger outreach_campaigns_content_changed: a second approval).
-- %(fed_by_source)s: the file declares a `source:` (such a campaign never finishes by itself,
-- outreach.finish_campaigns_v1). The update locks the row until the import commits, which is
-- what keeps a finish from racing the import's enrolments. %(business_days)s, %(country)s,
-- %(blackout_dates)s: the campaign's calendar (0137; email_queue_due, outreach.claim_emails_v3).
-- %(provider_match)s: the enrolment's provider match (0145, enrollment_insert_staged).
INSERT INTO outreach.campaigns AS c (key, name, timezone, send_days, window_start, window_end,
                                     source_file, stop_on_auto_reply, stop_on_domain_reply, status,
                                     overlap, content_version, fed_by_source, business_days,
                                     country, blackout_dates, provider_match)
VALUES (%(key)s, %(name)s, %(timezone)s, %(send_days)s, %(window_start)s, %(window_end)s,
        %(source_file)s, %(stop_on_auto_reply)s, %(stop_on_domain_reply)s, %(status)s,
        %(overlap)s, %(content_version)s, %(fed_by_source)s, %(business_days)s, %(country)s,
        %(blackout_dates)s::date[], %(provider_match)s)
ON CONFLICT ON CONSTRAINT outreach_campaigns_key_key DO UPDATE
SET name = excluded.name, timezone = excluded.timezone, send_days = excluded.send_days,
    window_start = excluded.window_start, window_end = excluded.window_end,
    source_file = excluded.source_file, stop_on_auto_reply = excluded.stop_on_auto_reply,
    stop_on_domain_reply = excluded.stop_on_domain_reply, overlap = excluded.overlap,
    content_version = excluded.content_version, fed_by_source = excluded.fed_by_source,
    business_days = excluded.business_days, country = excluded.country,
    blackout_dates = excluded.blackout_dates, provider_match = excluded.provider_match,
    updated_at = now()
RETURNING id;

-- name: campaign_mailbox_link
INSERT INTO outreach.campaign_mailboxes (campaign_id, mailbox_id)
VALUES (%(campaign_id)s, %(mailbox_id)s)
ON CONFLICT ON CONSTRAINT outreach_campaign_mailboxes_pkey DO NOTHING;

-- name: campaign_mailbox_unlink_others
-- A mailbox removed from the campaign file gets no new enrolments; existing rows keep theirs.
DELETE FROM outreach.campaign_mailboxes
WHERE campaign_id = %(campaign_id)s AND NOT (mailbox_id = ANY (%(mailbox_ids)s));

-- name: campaign_step_upsert
-- Steps are matched by position; editing a step's copy affects emails not yet sent.
INSERT INTO outreach.sequence_steps AS s (campaign_id, position, template, subject, delay_days,
                                         requires, thread)
VALUES (%(campaign_id)s, %(position)s, %(template)s, %(subject)s, %(delay_days)s, %(requires)s,
        %(thread)s)
ON CONFLICT ON CONSTRAINT outreach_sequence_steps_position_key DO UPDATE
SET template = excluded.template, subject = excluded.subject, delay_days = excluded.delay_days,
    requires = excluded.requires, thread = excluded.thread
RETURNING id;

-- name: campaign_variant_upsert
-- A step's A/B variant from the campaign file, matched by (step, name); a variant in the file is
-- active again. Its copy may change: rows already sent keep their send-log content version.
INSERT INTO outreach.step_variants AS v (step_id, name, position, subject, template, weight)
VALUES (%(step_id)s, %(name)s, %(position)s, %(subject)s, %(template)s, %(weight)s)
ON CONFLICT ON CONSTRAINT outreach_step_variants_pkey DO UPDATE
SET position = excluded.position, subject = excluded.subject, template = excluded.template,
    weight = excluded.weight, active = true;

-- name: campaign_variant_retire_others
-- Variants of the step no longer in the campaign file are retired, never deleted: queue-due no
-- longer chooses them, rows queued with one still render with its copy and the report counts it.
UPDATE outreach.step_variants SET active = false
WHERE step_id = %(step_id)s AND active AND NOT (name = ANY (%(names)s::text[]));

-- name: campaign_find
SELECT id, key, name, status, paused_reason, paused_at, paused_by, approved_at, approved_by,
       content_version, approved_content_version
FROM outreach.campaigns WHERE key = %(key)s;

-- name: campaign_list
-- Every campaign, by key (the campaign page's preview form).
SELECT id, key, name, status, paused_reason, paused_at, paused_by, approved_at, approved_by,
       content_version, approved_content_version
FROM outreach.campaigns ORDER BY key;

-- name: campaign_pause
-- Pause an active campaign: queue-due queues nothing for it and the claim takes none of its
-- queued steps (both check c.status = 'active'); they stay queued. Guarded by status = 'active'
-- and written with its history row in one statement (like mailbox_pause): pausing a paused
-- campaign changes nothing and keeps the first reason.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
paused AS (
    UPDATE outreach.campaigns c
    SET status = 'paused', paused_reason = %(reason)s, paused_at = n.now, paused_by = %(by)s,
        updated_at = n.now
    FROM n
    WHERE c.id = %(campaign_id)s AND c.status = 'active'
    RETURNING c.id, c.paused_at
)
INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
SELECT id, 'paused', %(by)s, %(reason)s, paused_at FROM paused
RETURNING campaign_id, created_at;

-- name: campaign_resume
-- Resume a paused campaign: its queued steps may be claimed again, within each mailbox's cap and
-- pacing (mailbox_remaining_today). Guarded by status = 'paused'.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
resumed AS (
    UPDATE outreach.campaigns c
    SET status = 'active', paused_reason = NULL, paused_at = NULL, paused_by = NULL,
        updated_at = n.now
    FROM n
    WHERE c.id = %(campaign_id)s AND c.status = 'paused'
    RETURNING c.id, n.now
)
INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
SELECT id, 'resumed', %(by)s, %(why)s, now FROM resumed
RETURNING campaign_id, created_at;

-- name: campaign_finish
-- Finish every campaign (one, %(campaign_key)s; NULL: all) whose enrolments are all done and
-- that has nothing in flight: outreach.finish_campaigns_v1 (sql/schema.sql, "Campaigns"), one
-- guarded UPDATE with its campaign_events row. Run by queue-due after it queued.
SELECT campaign_id, key, finished_at
FROM outreach.finish_campaigns_v1(%(now)s::timestamptz, %(campaign_key)s::text);

-- name: campaign_event_list
-- The status history (pause, resume, submit, approve, reject) of one campaign, or of all (%(campaign_id)s NULL), newest first.
SELECT ev.id, ev.campaign_id, c.key, ev.event, ev.actor, ev.reason, ev.created_at
FROM outreach.campaign_events ev
JOIN outreach.campaigns c ON c.id = ev.campaign_id
WHERE %(campaign_id)s::bigint IS NULL OR ev.campaign_id = %(campaign_id)s::bigint
ORDER BY ev.created_at DESC, ev.id DESC;

-- name: campaign_submit
-- Submit a draft for approval (draft → awaiting_approval). Guarded by status = 'draft' and
-- written with its history row in one statement: submitting twice changes nothing.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
done AS (
    UPDATE outreach.campaigns c SET status = 'awaiting_approval', updated_at = n.now
    FROM n
    WHERE c.id = %(campaign_id)s AND c.status = 'draft'
    RETURNING c.id, n.now
)
INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
SELECT id, 'submitted', %(by)s, %(reason)s, now FROM done
RETURNING campaign_id, created_at;

-- name: campaign_approve
-- Approve a submitted campaign (awaiting_approval → active, who and when kept on the row, and
-- the content version approved): the next queue-due queues its steps. Guarded by status =
-- 'awaiting_approval' and, when %(content_version)s is given (the version the approver was
-- shown, outreach_campaign_approval), by that version still being the campaign's: content synced
-- after the approver looked is not approved unseen. A campaign paused before its content changed
-- comes back active (the pause fields are cleared, as campaign_resume does).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
done AS (
    UPDATE outreach.campaigns c
    SET status = 'active', approved_at = n.now, approved_by = %(by)s, updated_at = n.now,
        approved_content_version = c.content_version,
        paused_reason = NULL, paused_at = NULL, paused_by = NULL
    FROM n
    WHERE c.id = %(campaign_id)s AND c.status = 'awaiting_approval'
      AND (%(content_version)s::text IS NULL
           OR c.content_version IS NOT DISTINCT FROM %(content_version)s::text)
    RETURNING c.id, n.now
)
INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
SELECT id, 'approved', %(by)s, %(reason)s, now FROM done
RETURNING campaign_id, created_at;

-- name: campaign_reject
-- Reject a submitted campaign (awaiting_approval → draft) with the reason. Guarded by status =
-- 'awaiting_approval'.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
done AS (
    UPDATE outreach.campaigns c SET status = 'draft', updated_at = n.now
    FROM n
    WHERE c.id = %(campaign_id)s AND c.status = 'awaiting_approval'
    RETURNING c.id, n.now
)
INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason, created_at)
SELECT id, 'rejected', %(by)s, %(reason)s, now FROM done
RETURNING campaign_id, created_at;

-- name: campaign_preview_rows
-- What a preview (outreach.preview) builds step %(step)s of the campaign from, for its enrolled
-- leads (one address, or the first %(limit)s by lead id): the columns email_claim_batch returns
-- (so the sender's own builder takes the row), the lead's email row for the step if it was
-- queued (id and idempotency_key: the Message-ID it gets; NULL before queue-due), and why the
-- step would skip the lead: its enrolment status, the one suppression function, and the step's
-- missing `requires` fields (outreach.lead_missing_fields, as email_queue_due asks them). The
-- A/B variant is the queued row's, else the one queue-due would choose (outreach.step_variant_for),
-- and its subject and/or template replace the step's.
SELECT e.id, e.idempotency_key, e.status::text AS email_status, 0 AS attempts, l.id AS lead_id,
       st.id AS step_id, 'marketing' AS message_class, l.email, l.first_name, l.last_name,
       l.company, l.title, l.custom, st.position AS step_position,
       coalesce(sv.template, st.template) AS template, coalesce(sv.subject, st.subject) AS subject,
       v.variant, st.thread AS step_thread, c.key AS campaign_key, c.name AS campaign_name,
       m.id AS mailbox_id, m.address AS mailbox_address, m.display_name AS mailbox_name,
       m.label AS mailbox_label, m.smtp_conn_id, m.dkim_selector, m.dkim_key_conn_id,
       en.status AS enrollment_status, outreach.is_suppressed(l.email) AS suppressed,
       outreach.lead_missing_fields(l, st.requires) AS missing
FROM outreach.campaigns c
JOIN outreach.sequence_steps st ON st.campaign_id = c.id AND st.position = %(step)s
JOIN outreach.enrollments en ON en.campaign_id = c.id
JOIN outreach.leads l ON l.id = en.lead_id
JOIN outreach.mailboxes m ON m.id = en.mailbox_id
LEFT JOIN outreach.emails e ON e.lead_id = l.id AND e.step_id = st.id
CROSS JOIN LATERAL (SELECT CASE WHEN e.id IS NOT NULL THEN e.variant
                                ELSE outreach.step_variant_for(st.id, l.id) END AS variant) v
LEFT JOIN outreach.step_variants sv ON sv.step_id = st.id AND sv.name = v.variant
WHERE c.key = %(key)s
  AND (%(address)s::text IS NULL OR l.email = outreach.normalize_address(%(address)s::text))
ORDER BY l.id
LIMIT %(limit)s;

-- name: campaign_awaiting_list
-- The campaigns awaiting approval (or the one named by %(key)s), with their latest 'submitted'
-- history row (a submit, or a content change of an approved campaign, trigger
-- outreach_campaigns_content_changed): outreach_campaign_approval opens one Required Action per
-- submission (alert key approval:<submitted_event_id>).
SELECT c.id, c.key, c.name, c.status, c.content_version, c.approved_content_version,
       c.timezone, c.send_days, ev.id AS submitted_event_id, ev.actor AS submitted_by,
       ev.reason AS submitted_reason, ev.created_at AS submitted_at
FROM outreach.campaigns c
LEFT JOIN LATERAL (SELECT id, actor, reason, created_at FROM outreach.campaign_events
                   WHERE campaign_id = c.id AND event = 'submitted'
                   ORDER BY created_at DESC, id DESC LIMIT 1) ev ON true
WHERE c.status = 'awaiting_approval' AND (%(key)s::text IS NULL OR c.key = %(key)s::text)
ORDER BY c.id;

-- name: campaign_mailbox_days
-- What each mailbox of the campaign may send on each of the next %(days)s days (its local
-- calendar days from %(now)s): outreach.mailbox_daily_limit, the cap and warm-up rule the claim
-- applies. A mailbox is shared by its campaigns: the limit is the mailbox's, not this campaign's.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT m.id AS mailbox_id, m.address, m.display_name, m.label, m.status, m.dkim_selector,
       m.dkim_key_conn_id, d.i AS day_index,
       ((n.now + make_interval(days => d.i)) AT TIME ZONE m.timezone)::date AS day,
       outreach.mailbox_daily_limit(m, n.now + make_interval(days => d.i)) AS daily_limit
FROM n, outreach.campaigns c
JOIN outreach.campaign_mailboxes cm ON cm.campaign_id = c.id
JOIN outreach.mailboxes m ON m.id = cm.mailbox_id
CROSS JOIN generate_series(0, %(days)s - 1) AS d (i)
WHERE c.id = %(campaign_id)s
ORDER BY m.id, d.i;
