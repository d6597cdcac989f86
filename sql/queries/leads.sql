-- Leads and enrolments. An import stages the parsed file in a temporary table and applies it
-- with set-based statements inside one transaction: all of a file's good rows, or nothing.

-- name: lead_stage_create
CREATE TEMPORARY TABLE outreach_lead_stage (
    line       integer NOT NULL,
    email      text NOT NULL,
    first_name text NOT NULL,
    last_name  text NOT NULL,
    company    text NOT NULL,
    title      text NOT NULL,
    timezone   text,
    suppressed boolean
) ON COMMIT DROP;

-- name: lead_stage_copy
COPY outreach_lead_stage (line, email, first_name, last_name, company, title, timezone)
FROM STDIN;

-- name: lead_stage_mark_suppressed
-- Suppression at import: the one function decides.
UPDATE outreach_lead_stage SET suppressed = outreach.is_suppressed(email)
RETURNING line, email, suppressed;

-- name: lead_upsert_staged
-- New leads are inserted; known leads are updated only when a field really changed, so importing
-- the same file twice changes nothing. Suppressed addresses are not stored at all.
INSERT INTO outreach.leads AS l (email, first_name, last_name, company, title, timezone)
SELECT email, first_name, last_name, company, title, timezone
FROM outreach_lead_stage WHERE NOT suppressed
ORDER BY line
ON CONFLICT ON CONSTRAINT outreach_leads_email_key DO UPDATE
SET first_name = excluded.first_name, last_name = excluded.last_name,
    company = excluded.company, title = excluded.title, timezone = excluded.timezone,
    updated_at = now()
WHERE (l.first_name, l.last_name, l.company, l.title, l.timezone)
      IS DISTINCT FROM (excluded.first_name, excluded.last_name, excluded.company, excluded.title,
                        excluded.timezone)
RETURNING l.id, (l.xmax = 0) AS inserted;

-- name: enrollment_insert_staged
-- Enrol every staged, unsuppressed lead; a lead already enrolled keeps its enrolment (and its
-- mailbox, so follow-ups come from the same sender). Mailboxes are assigned round-robin by lead id.
WITH mbs AS (
    SELECT array_agg(mailbox_id ORDER BY mailbox_id) AS ids
    FROM outreach.campaign_mailboxes WHERE campaign_id = %(campaign_id)s
)
INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id, enrolled_at)
SELECT %(campaign_id)s, l.id, mbs.ids[1 + (l.id %% cardinality(mbs.ids))],
       coalesce(%(now)s::timestamptz, now())
FROM outreach_lead_stage s
JOIN outreach.leads l ON l.email = s.email
CROSS JOIN mbs
WHERE NOT s.suppressed
ON CONFLICT ON CONSTRAINT outreach_enrollments_campaign_lead_key DO NOTHING
RETURNING id;

-- name: import_run_insert
INSERT INTO outreach.import_runs (kind, file, campaign_key, rows_total, imported, updated,
                                  duplicate, unchanged, invalid, suppressed, enrolled, problems)
VALUES (%(kind)s, %(file)s, %(campaign_key)s, %(rows_total)s, %(imported)s, %(updated)s,
        %(duplicate)s, %(unchanged)s, %(invalid)s, %(suppressed)s, %(enrolled)s, %(problems)s)
RETURNING id;

-- name: import_run_latest
SELECT * FROM outreach.import_runs WHERE kind = %(kind)s ORDER BY id DESC LIMIT 1;
