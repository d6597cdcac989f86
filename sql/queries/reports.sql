-- Read-only queries for the report.

-- name: report_jit_off
-- The report's queries run without PostgreSQL's JIT (on the report's own connection): on the
-- demo data JIT compiling report_mailbox_days cost 1,371 ms of a query that runs in 1.1 ms
-- without it (issue 30); the whole report went from 0.73-1.26 s to 0.08 s. The queries are
-- small joins over indexed rows, which JIT never pays for.
SET jit = off;

-- name: report_by_step
-- Per campaign, step and mailbox; transactional mail as campaign 'transactional', per template
-- (step NULL).
SELECT coalesce(c.key, e.message_class) AS campaign, st.position AS step, e.template,
       e.mailbox_id,
       count(*) FILTER (WHERE e.status = 'queued')::integer AS queued,
       count(*) FILTER (WHERE e.status = 'sending')::integer AS sending,
       count(*) FILTER (WHERE e.status = 'sent')::integer AS sent,
       count(*) FILTER (WHERE e.status = 'failed' AND e.failure_kind <> 'unconfirmed')::integer AS failed,
       count(*) FILTER (WHERE e.failure_kind = 'unconfirmed')::integer AS unconfirmed,
       count(*) FILTER (WHERE e.status = 'suppressed')::integer AS suppressed,
       count(*) FILTER (WHERE e.status = 'cancelled')::integer AS cancelled,
       (SELECT string_agg(k || '=' || n, ', ' ORDER BY k) FROM (
            SELECT e2.failure_kind AS k, count(*) AS n FROM outreach.emails e2
            WHERE e2.mailbox_id = e.mailbox_id AND e2.status = 'failed'
              AND (e2.step_id = st.id OR (st.id IS NULL AND e2.step_id IS NULL
                                          AND e2.template = e.template))
            GROUP BY e2.failure_kind) f) AS failed_reasons,
       -- Delivery failures by reason (outreach.reasons), at SMTP time or by a later DSN.
       (SELECT string_agg(k || '=' || n, ', ' ORDER BY k) FROM (
            SELECT e3.failure_reason AS k, count(*) AS n FROM outreach.emails e3
            WHERE e3.mailbox_id = e.mailbox_id AND e3.failure_reason IS NOT NULL
              AND (e3.step_id = st.id OR (st.id IS NULL AND e3.step_id IS NULL
                                          AND e3.template = e.template))
            GROUP BY e3.failure_reason) r) AS failure_reasons
FROM outreach.emails e
LEFT JOIN outreach.sequence_steps st ON st.id = e.step_id
LEFT JOIN outreach.campaigns c ON c.id = st.campaign_id
GROUP BY e.message_class, c.key, st.id, st.position, e.template, e.mailbox_id
ORDER BY e.message_class, c.key, st.position, e.template, e.mailbox_id;

-- name: report_mailboxes
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT m.id, m.address, m.status, m.paused_reason, m.transactional,
       outreach.mailbox_daily_limit(m, n.now) AS daily_limit,
       (SELECT count(*) FROM outreach.send_log s WHERE s.mailbox_id = m.id
          AND s.accepted_at >= (date_trunc('day', n.now AT TIME ZONE m.timezone) AT TIME ZONE m.timezone)
       )::integer AS used_today,
       (SELECT count(*) FROM outreach.send_log s WHERE s.mailbox_id = m.id)::integer AS sent_total
FROM outreach.mailboxes m, n
ORDER BY m.id;

-- name: report_totals
SELECT (SELECT count(*) FROM outreach.send_log)::integer AS send_log,
       (SELECT count(*) FROM outreach.emails)::integer AS emails,
       (SELECT count(*) FROM outreach.emails WHERE status = 'sent')::integer AS sent,
       (SELECT count(*) FROM outreach.leads)::integer AS leads;

-- name: report_sent_per_mailbox
-- Send-log entries per mailbox address (the demo compares them before and after a run).
SELECT m.address, count(s.id)::integer AS n
FROM outreach.mailboxes m LEFT JOIN outreach.send_log s ON s.mailbox_id = m.id
GROUP BY m.address;

-- name: report_email_status_counts
SELECT status::text AS status, count(*)::integer AS n FROM outreach.emails GROUP BY status;

-- name: report_missing_fields
-- Leads a step is not queued for because they lack a field the step requires (sequence_steps.
-- requires; the rule is outreach.lead_missing_fields, the one email_queue_due applies): active
-- enrolments of active campaigns without an email for the step, per campaign, step and the
-- fields they lack. A lead whose field is filled in (a re-import) is queued by the next run.
SELECT c.key AS campaign, st.position AS step, array_to_string(m.missing, ', ') AS missing,
       count(*)::integer AS leads
FROM outreach.sequence_steps st
JOIN outreach.campaigns c ON c.id = st.campaign_id
JOIN outreach.enrollments en ON en.campaign_id = c.id
JOIN outreach.leads l ON l.id = en.lead_id
CROSS JOIN LATERAL (SELECT outreach.lead_missing_fields(l, st.requires) AS missing) m
WHERE st.requires <> '{}' AND m.missing <> '{}'
  AND c.status = 'active' AND en.status = 'active'
  AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
  AND NOT EXISTS (SELECT 1 FROM outreach.emails e WHERE e.lead_id = en.lead_id AND e.step_id = st.id)
GROUP BY c.key, st.position, m.missing
ORDER BY c.key, st.position, m.missing;

-- name: report_waiting
-- Queued rows the contact policy holds back (emails.hold_reason, set by outreach.claim_emails_v3):
-- per campaign, step and reason, how many and when the first may go ("waiting: frequency cap").
SELECT c.key AS campaign, st.position AS step, e.hold_reason AS reason, count(*)::integer AS emails,
       min(e.scheduled_for) AS next_at
FROM outreach.emails e
JOIN outreach.campaigns c ON c.id = e.campaign_id
JOIN outreach.sequence_steps st ON st.id = e.step_id
WHERE e.status = 'queued' AND e.hold_reason IS NOT NULL
  AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
GROUP BY c.key, st.position, e.hold_reason
ORDER BY c.key, st.position, e.hold_reason;

-- name: report_funnel
-- Per campaign and step, the funnel the campaign page draws. enrolled: the campaign's
-- enrolments (the top, the same on every step); queued: waiting or being sent; sent: accepted
-- (or confirmed by an operator); replied: sent, the lead's enrolment stopped as 'replied', and
-- no later step was sent; bounced: a hard bounce (as the bounce-rate rule counts one:
-- mailbox_bounce_counts); unsubscribed: a one-click unsubscribe from this very email, or the
-- List-Unsubscribe mailto carrying its token (source mailto:inbound:<id>; a mailto matched only by
-- the sender's address names no email, so no step);
-- unconfirmed; failed: any other failure; complained: an ARF/feedback-loop complaint about this
-- email; sender_blocked: refused for a reason of ours (outreach.bounces); stopped_domain_reply /
-- stopped_auto_reply: the last step sent before the enrolment stopped because a colleague at the
-- same company replied (stop_on_domain_reply) or an auto-reply came (stop_on_auto_reply).
-- %(by_variant)s: one row per A/B variant of the step too (variant NULL: the step's emails
-- without one, and a step with no email yet), counted by the same rules; else variant is NULL.
SELECT c.key AS campaign, st.position AS step,
       CASE WHEN %(by_variant)s::boolean THEN e.variant END AS variant,
       (SELECT count(*) FROM outreach.enrollments en WHERE en.campaign_id = c.id)::integer AS enrolled,
       count(e.id) FILTER (WHERE e.status IN ('queued', 'sending'))::integer AS queued,
       count(e.id) FILTER (WHERE e.status = 'sent')::integer AS sent,
       count(e.id) FILTER (WHERE e.status = 'sent' AND en.status = 'replied' AND NOT EXISTS (
           SELECT 1 FROM outreach.emails later JOIN outreach.sequence_steps ls ON ls.id = later.step_id
           WHERE later.lead_id = e.lead_id AND ls.campaign_id = c.id AND ls.position > st.position
             AND later.status = 'sent'))::integer AS replied,
       count(e.id) FILTER (WHERE
           (e.failure_kind = 'permanent' AND e.last_error ~ '^RCPT 5[0-9][0-9] (.* )?5\.1\.[0-9]+')
           OR EXISTS (SELECT 1 FROM outreach.delivery_failures f
                      WHERE f.email_id = e.id AND f.owner = 'address')
           OR (e.status = 'sent' AND EXISTS (
               SELECT 1 FROM outreach.suppressions s
               WHERE s.kind = 'address' AND s.value = lower(l.email) AND s.reason = 'bounced'))
       )::integer AS bounced,
       count(e.id) FILTER (WHERE EXISTS (
           SELECT 1 FROM outreach.suppressions s
           WHERE s.kind = 'address' AND s.value = lower(l.email)
             AND (s.source = 'one-click:email:' || e.id
                  OR s.source IN (SELECT 'mailto:inbound:' || im.id
                                  FROM outreach.inbound_messages im
                                  WHERE im.email_id = e.id AND im.class = 'unsubscribe'))))::integer AS unsubscribed,
       count(e.id) FILTER (WHERE e.failure_kind = 'unconfirmed')::integer AS unconfirmed,
       count(e.id) FILTER (WHERE e.status = 'failed' AND e.failure_kind <> 'unconfirmed')::integer AS failed,
       count(e.id) FILTER (WHERE EXISTS (
           SELECT 1 FROM outreach.inbound_messages im
           WHERE im.email_id = e.id AND im.class = 'complaint'))::integer AS complained,
       count(e.id) FILTER (WHERE EXISTS (
           SELECT 1 FROM outreach.delivery_failures f
           WHERE f.email_id = e.id AND f.owner = 'sender'))::integer AS sender_blocked,
       count(e.id) FILTER (WHERE e.status = 'sent' AND en.status = 'stopped'
                             AND en.stop_reason LIKE 'a colleague at %%' AND NOT EXISTS (
           SELECT 1 FROM outreach.emails later JOIN outreach.sequence_steps ls ON ls.id = later.step_id
           WHERE later.lead_id = e.lead_id AND ls.campaign_id = c.id AND ls.position > st.position
             AND later.status = 'sent'))::integer AS stopped_domain_reply,
       count(e.id) FILTER (WHERE e.status = 'sent' AND en.status = 'stopped'
                             AND en.stop_reason LIKE 'auto-reply%%' AND NOT EXISTS (
           SELECT 1 FROM outreach.emails later JOIN outreach.sequence_steps ls ON ls.id = later.step_id
           WHERE later.lead_id = e.lead_id AND ls.campaign_id = c.id AND ls.position > st.position
             AND later.status = 'sent'))::integer AS stopped_auto_reply
FROM outreach.campaigns c
JOIN outreach.sequence_steps st ON st.campaign_id = c.id
LEFT JOIN outreach.emails e ON e.step_id = st.id
LEFT JOIN outreach.leads l ON l.id = e.lead_id
LEFT JOIN outreach.enrollments en ON en.campaign_id = c.id AND en.lead_id = e.lead_id
GROUP BY c.id, c.key, st.position, 3
ORDER BY c.key, st.position, 3;

-- name: report_mailbox_days
-- Per mailbox and local calendar day of the last %(days)s days (today included): emails
-- accepted (send log), the daily cap, and the day's limit (warm-up ramp and cap:
-- outreach.mailbox_daily_limit at the day's noon); and the domain's Postmaster spam rate that
-- day — NULL when Postmaster had no figure (an unknown day, never 0).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
d AS (
    SELECT m.id AS mailbox_id, m.daily_cap, m.timezone, lower(split_part(m.address, '@', 2)) AS domain,
           day::date AS day
    FROM outreach.mailboxes m CROSS JOIN n
    CROSS JOIN LATERAL generate_series(date_trunc('day', n.now AT TIME ZONE m.timezone)
                                       - (%(days)s - 1) * interval '1 day',
                                       date_trunc('day', n.now AT TIME ZONE m.timezone),
                                       interval '1 day') AS day
)
SELECT d.mailbox_id, d.day, d.daily_cap,
       outreach.mailbox_daily_limit(m, ((d.day + time '12:00') AT TIME ZONE d.timezone)) AS daily_limit,
       (SELECT count(*) FROM outreach.send_log s
        WHERE s.mailbox_id = d.mailbox_id
          AND s.accepted_at >= (d.day::timestamp AT TIME ZONE d.timezone)
          AND s.accepted_at < ((d.day + 1)::timestamp AT TIME ZONE d.timezone))::integer AS sent,
       (SELECT p.value FROM outreach.postmaster_stats p
        WHERE p.domain = d.domain AND p.metric = 'SPAM_RATE' AND p.feedback_loop_id = ''
          AND p.day = d.day AND p.has_data) AS spam_rate
FROM d JOIN outreach.mailboxes m ON m.id = d.mailbox_id
ORDER BY d.mailbox_id, d.day;

-- name: report_mailbox_health
-- Per mailbox over the last %(window)s: sends (handed off with a final verdict, as the
-- bounce-rate rule counts them), hard bounces (the same rule, per address) and complaints
-- (recipients suppressed as 'complained', per address); paused state with who, when and why.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT m.id, m.label, m.display_name, m.address, m.status, m.paused_by, m.paused_at, m.paused_reason,
       count(e.id)::integer AS sends,
       count(DISTINCT lower(coalesce(l.email, e.recipient))) FILTER (WHERE
           (e.failure_kind = 'permanent' AND e.last_error ~ '^RCPT 5[0-9][0-9] (.* )?5\.1\.[0-9]+')
           OR EXISTS (SELECT 1 FROM outreach.delivery_failures f
                      WHERE f.email_id = e.id AND f.owner = 'address')
           OR EXISTS (SELECT 1 FROM outreach.suppressions s
                      WHERE s.kind = 'address' AND s.value = lower(coalesce(l.email, e.recipient))
                        AND s.reason = 'bounced'))::integer AS hard_bounces,
       count(DISTINCT lower(coalesce(l.email, e.recipient))) FILTER (WHERE EXISTS (
           SELECT 1 FROM outreach.suppressions s
           WHERE s.kind = 'address' AND s.value = lower(coalesce(l.email, e.recipient))
             AND s.reason = 'complained'))::integer AS complaints
FROM outreach.mailboxes m CROSS JOIN n
LEFT JOIN outreach.emails e
       ON e.mailbox_id = m.id AND e.claimed_at >= n.now - %(window)s::interval
      AND (e.status = 'sent' OR e.failure_kind IN ('permanent', 'sender_refused'))
LEFT JOIN outreach.leads l ON l.id = e.lead_id
GROUP BY m.id
ORDER BY m.id;

-- name: report_inbound_counts
-- Inbound mail by class and reason (the text report's inbound lines), and how many of each
-- changed something (an effect other than 'none…').
SELECT im.class, coalesce(im.reason, '') AS reason, count(*)::integer AS n,
       count(*) FILTER (WHERE im.effect NOT LIKE 'none%%')::integer AS applied
FROM outreach.inbound_messages im
GROUP BY im.class, coalesce(im.reason, '')
ORDER BY im.class, 2;

-- name: report_campaign_progress
-- Per campaign and mailbox, the campaign page's progress: sent (accepted or confirmed by an
-- operator), queued (waiting or being sent: what is left to send of the steps queued so far),
-- and the campaign's name and status. Every campaign appears, even one with no email yet
-- (mailbox_id NULL): an import whose queue-due has not run shows 0 queued, not nothing.
SELECT c.key AS campaign, c.name, c.status::text AS status, e.mailbox_id,
       count(e.id) FILTER (WHERE e.status = 'sent')::integer AS sent,
       count(e.id) FILTER (WHERE e.status IN ('queued', 'sending'))::integer AS queued
FROM outreach.campaigns c
LEFT JOIN outreach.emails e ON e.campaign_id = c.id
GROUP BY c.key, c.name, c.status, e.mailbox_id
ORDER BY c.key, e.mailbox_id;
