-- Campaigns, their sequence steps and mailboxes: written when a reviewed campaign file is synced.

-- name: campaign_upsert
-- %(status)s (the file's `status`: draft or active) applies only when the campaign is created: a
-- later sync never changes the status (approval, a pause are decided in the database).
-- %(fed_by_source)s: the file declares a `source:` (such a campaign never finishes by itself,
-- outreach.finish_campaigns_v1). The update locks the row until the import commits, which is
-- what keeps a finish from racing the import's enrolments.
INSERT INTO outreach.campaigns AS c (key, name, timezone, send_days, window_start, window_end,
                                     source_file, stop_on_auto_reply, stop_on_domain_reply, status,
                                     fed_by_source)
VALUES (%(key)s, %(name)s, %(timezone)s, %(send_days)s, %(window_start)s, %(window_end)s,
        %(source_file)s, %(stop_on_auto_reply)s, %(stop_on_domain_reply)s, %(status)s,
        %(fed_by_source)s)
ON CONFLICT ON CONSTRAINT outreach_campaigns_key_key DO UPDATE
SET name = excluded.name, timezone = excluded.timezone, send_days = excluded.send_days,
    window_start = excluded.window_start, window_end = excluded.window_end,
    source_file = excluded.source_file, stop_on_auto_reply = excluded.stop_on_auto_reply,
    stop_on_domain_reply = excluded.stop_on_domain_reply,
    fed_by_source = excluded.fed_by_source, updated_at = now()
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

-- name: campaign_find
SELECT id, key, name, status, paused_reason, paused_at, paused_by, approved_at, approved_by
FROM outreach.campaigns WHERE key = %(key)s;

-- name: campaign_list
-- Every campaign, by key (the campaign page's preview form).
SELECT id, key, name, status, paused_reason, paused_at, paused_by, approved_at, approved_by
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
-- Approve a submitted campaign (awaiting_approval → active, who and when kept on the row): the
-- next queue-due queues its steps. Guarded by status = 'awaiting_approval'.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
done AS (
    UPDATE outreach.campaigns c
    SET status = 'active', approved_at = n.now, approved_by = %(by)s, updated_at = n.now
    FROM n
    WHERE c.id = %(campaign_id)s AND c.status = 'awaiting_approval'
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
-- missing `requires` fields (outreach.lead_missing_fields, as email_queue_due asks them).
SELECT e.id, e.idempotency_key, e.status::text AS email_status, 0 AS attempts, l.id AS lead_id,
       st.id AS step_id, 'marketing' AS message_class, l.email, l.first_name, l.last_name,
       l.company, l.title, l.custom, st.position AS step_position, st.template, st.subject,
       st.thread AS step_thread, c.key AS campaign_key, c.name AS campaign_name,
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
WHERE c.key = %(key)s
  AND (%(address)s::text IS NULL OR l.email = outreach.normalize_address(%(address)s::text))
ORDER BY l.id
LIMIT %(limit)s;
