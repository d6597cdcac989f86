-- Read-only queries for the report.

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
            GROUP BY e2.failure_kind) f) AS failed_reasons
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
