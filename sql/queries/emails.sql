-- Emails: one row per (lead, sequence step). Every state change after the claim is one guarded
-- UPDATE: it names the status it expects and, for claimed rows, the claim token. A statement that
-- matches no row changes nothing, and the caller logs it.
-- "Now" can be passed in (%(now)s); NULL means the database clock.

-- name: email_queue_due
-- One set-based statement queues the due step of every eligible lead: step 1 once the lead is
-- enrolled (plus its delay), step n once step n-1 was sent delay_days ago. ON CONFLICT on
-- (lead, step) makes a second run, or a concurrent one, insert nothing. A lead lacking a field
-- the step requires is not queued for it (report_missing_fields counts them; lead_missing_fields
-- is inlined, and a step without requires skips it). Returns one row per mailbox with how many
-- were queued (never one row per email).
-- The due pairs (due) come first, materialised, so that the one suppression rule is asked only
-- for pairs that are due, and once for all of them: outreach.suppressed_addresses gets every due
-- address in one array (the erasure key checked once, each address hashed once; 0139) instead of
-- one outreach.is_suppressed call per pair. scheduled_for is the next open slot of the
-- campaign's send window in the lead's time zone (falling back to the campaign's), computed once
-- per campaign, time zone and holiday country (outreach.lead_country) of the due pairs (slot),
-- skipping the country's holidays and the campaign's blackout dates (outreach.next_open_slot,
-- 0137), not once per row — and only for those: a
-- lead that is not due (not enrolled, stopped, another campaign) never has its time zone read,
-- so a zone PostgreSQL does not know cannot stop queue-due for everyone (review, 2026-12-01). The idempotency key (the Message-ID) is md5 of a random
-- seed drawn once per run and the row's (lead, step): unique as (lead, step) is, unguessable
-- without the seed, and without one gen_random_uuid() per row (on a PostgreSQL built without
-- OpenSSL each reads the kernel's random source). Rows go in (lead, step) order: the unique index and the lead's foreign-key check
-- then walk their b-trees in order (100,000 leads: a tenth less CPU than in hash order).
-- Only the leads whose id is %(part)s modulo %(parts)s (0 and 1: all): outreach.queue.queue_due
-- runs the parts on their own connections at once, one core each. Two runs or parts never wait
-- on each other in a cycle: each inserts in (lead, step) order, so a conflicting key is always
-- the lowest one it still needs.
-- Run it after email_planner_bulk_joins (see there): planned with nested loops on a fresh database,
-- the NOT EXISTS rescans outreach.emails once per candidate while the same statement fills it.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now, gen_random_uuid()::text AS seed),
due AS MATERIALIZED (
    SELECT en.lead_id, st.id AS step_id, c.id AS campaign_id, en.mailbox_id,
           coalesce(l.timezone, c.timezone) AS tz, l.email,
           outreach.lead_country(l.custom, c.country) AS country
    FROM n
    CROSS JOIN outreach.enrollments en
    JOIN outreach.campaigns c ON c.id = en.campaign_id
    JOIN outreach.leads l ON l.id = en.lead_id
    JOIN outreach.sequence_steps st ON st.campaign_id = c.id
    LEFT JOIN outreach.sequence_steps prev
           ON prev.campaign_id = c.id AND prev.position = st.position - 1
    LEFT JOIN outreach.emails pe ON pe.lead_id = en.lead_id AND pe.step_id = prev.id
    WHERE en.status = 'active' AND c.status = 'active'
      AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
      AND en.lead_id %% %(parts)s::integer = %(part)s::integer
      AND (st.position = 1 OR pe.status = 'sent')
      AND CASE WHEN st.position = 1 THEN en.enrolled_at ELSE pe.sent_at END
          + st.delay_days * interval '1 day' <= n.now
      -- business_days (0137): the delay counts working days in the lead's zone and country
      -- (outreach.add_working_days); asked only once the calendar-day delay has passed (a
      -- working-day delay is never shorter), so a lead not due costs no call.
      AND CASE WHEN NOT c.business_days OR st.delay_days = 0 THEN true
               WHEN CASE WHEN st.position = 1 THEN en.enrolled_at ELSE pe.sent_at END
                    + st.delay_days * interval '1 day' > n.now THEN false
               ELSE outreach.add_working_days(
                        CASE WHEN st.position = 1 THEN en.enrolled_at ELSE pe.sent_at END,
                        st.delay_days, coalesce(l.timezone, c.timezone),
                        outreach.lead_country(l.custom, c.country)) <= n.now END
      AND NOT EXISTS (SELECT 1 FROM outreach.emails e
                      WHERE e.lead_id = en.lead_id AND e.step_id = st.id)
      AND (st.requires = '{}' OR outreach.lead_missing_fields(l, st.requires) = '{}')
      -- overlap 'wait': step 1 waits while the lead is in an earlier enrolment's sequence
      -- (outreach.lead_in_other_sequence, migration 0134).
      AND (st.position > 1 OR c.overlap <> 'wait'
           OR outreach.lead_in_other_sequence(en.lead_id, c.id, en.enrolled_at, en.id) IS NULL)
),
slot AS MATERIALIZED (
SELECT p.campaign_id, p.tz, p.country,
       outreach.next_open_slot(n.now, p.tz, c.send_days, c.window_start, c.window_end,
                               p.country, c.blackout_dates) AS at
FROM (SELECT DISTINCT campaign_id, tz, country FROM due) p
JOIN outreach.campaigns c ON c.id = p.campaign_id
CROSS JOIN n
),
sup AS MATERIALIZED (
SELECT address FROM outreach.suppressed_addresses(ARRAY(SELECT email FROM due))
),
ins AS (
INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for,
                             idempotency_key, variant)
SELECT d.lead_id, d.step_id, d.campaign_id, d.mailbox_id, s.at,
       md5(n.seed || '/' || d.lead_id || '/' || d.step_id)::uuid,
       -- The A/B variant, fixed here for good (trigger outreach_emails_keep_variant); asked only
       -- for steps that have active variants (a hashed subplan), so a step without costs nothing.
       CASE WHEN d.step_id IN (SELECT sv.step_id FROM outreach.step_variants sv WHERE sv.active)
            THEN outreach.step_variant_for(d.step_id, d.lead_id) END
FROM due d
CROSS JOIN n
JOIN slot s ON s.campaign_id = d.campaign_id AND s.tz = d.tz
            AND s.country IS NOT DISTINCT FROM d.country
WHERE NOT EXISTS (SELECT 1 FROM sup WHERE sup.address = d.email)
ORDER BY d.lead_id, d.step_id
ON CONFLICT ON CONSTRAINT outreach_emails_lead_step_key DO NOTHING
RETURNING mailbox_id
)
SELECT mailbox_id, count(*)::integer AS queued FROM ins GROUP BY mailbox_id ORDER BY mailbox_id;

-- name: email_planner_bulk_joins
-- For the rest of this transaction, plan joins as hash or merge joins. email_queue_due is one
-- bulk INSERT … SELECT whose NOT EXISTS reads the table it inserts into: when the statistics say
-- outreach.emails is empty (a fresh database, the first run after a big import), the planner picks
-- a nested-loop anti join that scans outreach.emails once per candidate row, and that table grows
-- as the statement inserts — quadratic (EXPLAIN ANALYZE, 20,000 leads: 2.8 s with it, 0.6 s
-- without; 100,000 leads: 116 s). A hash anti join reads outreach.emails once.
SET LOCAL enable_nestloop = off;

-- name: email_claim_batch
-- The claim of campaign rows: outreach.claim_emails_v4 (sql/schema.sql, "The claim") locks up to
-- %(limit)s due rows of one mailbox that no other sender holds, in their send window, stamps a
-- fresh claim token, claimed_at and attempts + 1; this query returns with them everything needed
-- to build the messages. The caller holds the mailbox lock and caps %(limit)s by
-- mailbox_remaining_today. %(person_per_day)s, %(person_per_week)s, %(company_per_day)s: the
-- contact policy across campaigns (NULL: off), decided in the claim; rows over it stay queued,
-- later, with their hold_reason.
WITH claimed AS (
    SELECT * FROM outreach.claim_emails_v4('marketing', %(mailbox_id)s::bigint, %(limit)s::integer,
                                           %(claim_token)s::uuid, %(claimed_by)s::text,
                                           %(now)s::timestamptz, %(person_per_day)s::integer,
                                           %(person_per_week)s::integer,
                                           %(company_per_day)s::integer,
                                           %(provider_hourly)s::jsonb)
)
SELECT cl.id, cl.claim_token, cl.attempts, cl.idempotency_key, cl.lead_id, cl.step_id,
       cl.message_class, l.email, l.first_name, l.last_name, l.company, l.title, l.custom,
       st.position AS step_position, coalesce(sv.template, st.template) AS template,
       coalesce(sv.subject, st.subject) AS subject, st.thread AS step_thread, cl.variant,
       c.key AS campaign_key, c.name AS campaign_name,
       m.id AS mailbox_id, m.address AS mailbox_address, m.display_name AS mailbox_name,
       m.label AS mailbox_label,
       m.smtp_conn_id, m.dkim_selector, m.dkim_key_conn_id
FROM claimed cl
JOIN outreach.leads l ON l.id = cl.lead_id
JOIN outreach.sequence_steps st ON st.id = cl.step_id
-- The row's A/B variant (0126) renders its own subject and/or template, the step's otherwise.
LEFT JOIN outreach.step_variants sv ON sv.step_id = cl.step_id AND sv.name = cl.variant
JOIN outreach.campaigns c ON c.id = cl.campaign_id
JOIN outreach.mailboxes m ON m.id = cl.mailbox_id
ORDER BY cl.scheduled_for, cl.id;

-- name: email_claim_held
-- What the claim just made in this transaction held back and skipped (claim_emails_v4 sets it,
-- migration 0146): {"held": {reason: rows}, "busy": rows}; '' when the call held nothing to say.
SELECT current_setting('outreach.claim_held', true) AS held;

-- name: email_claim_transactional
-- The claim of transactional rows: the same function (outreach.claim_emails_v1), over due
-- transactional rows of one active mailbox. No send window, daily cap or warm-up holds them back
-- (mail the recipient is waiting for); a paused mailbox sends nothing. Returns the columns
-- email_claim_batch returns, for the same send path.
WITH claimed AS (
    SELECT * FROM outreach.claim_emails_v1('transactional', %(mailbox_id)s::bigint,
                                           %(limit)s::integer, %(claim_token)s::uuid,
                                           %(claimed_by)s::text, %(now)s::timestamptz)
)
SELECT cl.id, cl.claim_token, cl.attempts, cl.idempotency_key, cl.lead_id, cl.step_id,
       cl.message_class, cl.recipient AS email, cl.template, cl.context, cl.delivery_key,
       m.id AS mailbox_id, m.address AS mailbox_address, m.display_name AS mailbox_name,
       m.label AS mailbox_label,
       m.smtp_conn_id, m.dkim_selector, m.dkim_key_conn_id
FROM claimed cl
JOIN outreach.mailboxes m ON m.id = cl.mailbox_id
ORDER BY cl.scheduled_for, cl.id;

-- name: email_plan_transactional
-- Mailboxes with due transactional rows, and how many.
SELECT m.id AS mailbox_id, m.address, m.status, count(e.id)::integer AS due
FROM outreach.emails e
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE e.status = 'queued' AND e.message_class = 'transactional'
  AND e.scheduled_for <= coalesce(%(now)s::timestamptz, now())
GROUP BY m.id, m.address, m.status
ORDER BY m.id;

-- name: email_mark_sent
-- Only after the server accepted the message (2xx to the end of DATA): mark the row sent and
-- write its one send-log entry in the same statement. The guard (sending + our claim token)
-- means a row the reaper or an operator took over is never overwritten. The Subject as sent is
-- kept (a threaded follow-up replies with "Re: " + it, see email_thread), and the content
-- version the message was built from (outreach.content).
-- Committed without waiting for the WAL flush (synchronous_commit off for this statement's
-- transaction only): the next synchronous commit on the server flushes the WAL up to and past
-- it (the next row's handoff stamp, email_touch_claim, is one), else the WAL writer does within
-- three times wal_writer_delay (PostgreSQL docs, 30.4 Asynchronous Commit). Only a crash of the database server in between can lose it, and then the row
-- is what it was before: 'sending' with its handoff stamp, which the reaper fails as
-- unconfirmed, never resends.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now,
                  set_config('synchronous_commit', 'off', true) AS synchronous_commit),
done AS (
    UPDATE outreach.emails e
    SET status = 'sent', sent_at = n.now, last_error = NULL, updated_at = n.now
    FROM n
    WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
    RETURNING e.id, e.mailbox_id
)
INSERT INTO outreach.send_log (email_id, mailbox_id, message_id, smtp_reply, accepted_at,
                               subject, content_version)
SELECT done.id, done.mailbox_id, %(message_id)s, %(smtp_reply)s, n.now, %(subject)s,
       %(content_version)s
FROM done, n
RETURNING email_id;

-- name: email_mark_retry
-- Not accepted, retryable: back to the queue %(retry_after)s later, unless this was the last
-- allowed attempt, in which case the row fails with the last reply.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
UPDATE outreach.emails e
SET status = CASE WHEN e.attempts >= %(max_attempts)s THEN 'failed' ELSE 'queued' END
                 ::outreach.email_status,
    failure_kind = CASE WHEN e.attempts >= %(max_attempts)s THEN 'retries_exhausted' END,
    scheduled_for = CASE WHEN e.attempts >= %(max_attempts)s THEN e.scheduled_for
                         ELSE n.now + %(retry_after)s::interval END,
    handed_over_at = CASE WHEN e.attempts >= %(max_attempts)s THEN e.handed_over_at END,
    last_error = %(error)s, updated_at = n.now
FROM n
WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
RETURNING e.status, e.attempts, e.scheduled_for;

-- name: email_mark_failed
-- Final failure of a claimed row: 'permanent' (5xx), 'render' (the template failed) or
-- 'unconfirmed' (the end of DATA was sent and no reply came: check Sent Items, never retried).
UPDATE outreach.emails e
SET status = 'failed', failure_kind = %(failure_kind)s, last_error = %(error)s, updated_at = now()
WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
RETURNING e.id;

-- name: email_mark_suppressed
-- The pre-send check found the address suppressed: the row ends without a handoff.
UPDATE outreach.emails e
SET status = 'suppressed', updated_at = now()
WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
RETURNING e.id;

-- name: email_reap_stale
-- Rows whose sender stopped (a killed worker, a lost connection). The handoff stamp
-- (handed_over_at, committed right before MAIL FROM of the row, see email_touch_claim) says what
-- they may be and how soon that is known:
-- * never handed over: the server never saw them. Back to the queue, the attempt not counted
--   (the claim counted it), due as before: as soon as neither the claim nor the live sender's
--   heartbeat (claim_heartbeat_at, email_heartbeat_claim) is younger than %(release)s, the short
--   release threshold (a dead sender's rows reach their leads minutes late, not 30), or once
--   the claim is older than %(threshold)s whatever the heartbeat says.
-- * handed over: they may or may not have gone out. Failed as unconfirmed, for a person, once
--   the stamp is older than %(threshold)s (the 30-minute rule, never the short one: a heartbeat
--   proves nothing about a handoff in flight).
-- One statement, guarded by status and the claim and heartbeat ages. Under READ COMMITTED an
-- UPDATE that meets a row a sender changed concurrently re-checks the WHERE and recomputes SET on
-- the newest row version, so a row that finished, or was stamped, touched or heartbeaten
-- meanwhile (the stamp also restarts claimed_at), is judged on what it is now, never on this
-- statement's snapshot; a sender whose row was taken finds out at its stamp (status and claim
-- token no longer match) and does not send it.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
UPDATE outreach.emails e
SET status = CASE WHEN e.handed_over_at IS NULL THEN 'queued' ELSE 'failed' END
                 ::outreach.email_status,
    failure_kind = CASE WHEN e.handed_over_at IS NULL THEN NULL ELSE 'unconfirmed' END,
    attempts = CASE WHEN e.handed_over_at IS NULL THEN greatest(e.attempts - 1, 0)
                    ELSE e.attempts END,
    claim_heartbeat_at = NULL,
    last_error = CASE WHEN e.handed_over_at IS NULL THEN
                     format('reaper: left sending (claimed by %%s at %%s, last heartbeat %%s) with '
                            'no sign of its sender for over %%s and never handed over to the SMTP '
                            'server; back in the queue, attempt not counted',
                            e.claimed_by, e.claimed_at, coalesce(e.claim_heartbeat_at::text, 'none'),
                            CASE WHEN e.claimed_at < n.now - %(threshold)s::interval
                                 THEN %(threshold)s::interval ELSE %(release)s::interval END)
                 ELSE
                     format('left sending for over %%s (claimed by %%s, handed over at %%s): '
                            'check Sent Items before doing anything',
                            %(threshold)s::interval, e.claimed_by, e.handed_over_at)
                 END,
    updated_at = n.now
FROM n
WHERE e.status = 'sending'
  AND (e.claimed_at < n.now - %(threshold)s::interval
       OR (e.handed_over_at IS NULL
           AND greatest(e.claimed_at, e.claim_heartbeat_at) < n.now - %(release)s::interval))
RETURNING e.id, e.mailbox_id, e.claimed_by, e.claimed_at, e.handed_over_at,
          (e.status = 'failed') AS unconfirmed;

-- name: email_heartbeat_claim
-- The live sender's heartbeat on its claim (outreach.send.ClaimHeartbeat, every few seconds while
-- a batch runs): the claim's rows not yet handed over show their sender is alive, so the reaper's
-- short release (email_reap_stale) leaves them alone. %(ids)s: the claim's row ids (the primary
-- key finds them). Guarded by status and claim token: a row
-- the reaper took meanwhile stays taken. Stamped rows are not touched (the 30-minute rule is
-- theirs). Returns how many rows it refreshed.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
     beat AS (
        UPDATE outreach.emails e
        SET claim_heartbeat_at = n.now
        FROM n
        WHERE e.id = ANY (%(ids)s::bigint[]) AND e.claim_token = %(claim_token)s
          AND e.status = 'sending'
          AND e.handed_over_at IS NULL
        RETURNING e.id)
SELECT count(*)::integer AS refreshed FROM beat;

-- name: email_plan_mailboxes
-- Mailboxes with due rows, for the send plan: how many are due now (all mailboxes, or one).
-- Only rows of active campaigns count, as the claim takes only those (outreach.claim_emails_v4):
-- a draft, awaiting or paused campaign's queued rows (inserted by hand, or queued before a pause)
-- plan no batch that would claim nothing. frozen: the mailbox's local date is in its freeze
-- (the mailbox file's `freeze:`, 0137): the claim takes nothing from it today.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT m.id AS mailbox_id, m.address, m.status, count(e.id)::integer AS due,
       coalesce((n.now AT TIME ZONE m.timezone)::date BETWEEN m.freeze_from AND m.freeze_to,
                false) AS frozen
FROM outreach.mailboxes m
JOIN outreach.emails e ON e.mailbox_id = m.id AND e.status = 'queued'
                       AND e.message_class = 'marketing'
JOIN outreach.campaigns c ON c.id = e.campaign_id AND c.status = 'active'
CROSS JOIN n
WHERE e.scheduled_for <= n.now
  AND (%(mailbox_id)s::bigint IS NULL OR m.id = %(mailbox_id)s::bigint)
GROUP BY m.id, m.address, m.status, n.now
ORDER BY m.id;

-- name: email_queued_needing_smtputf8
-- Queued rows per mailbox whose recipient's local part is not ASCII: only a relay that offers
-- SMTPUTF8 can carry them (RFC 6531 §3.4; the rule: outreach.transport.relay_cannot_carry). The
-- relay preflight names how many a relay without it would fail.
SELECT e.mailbox_id, count(*)::integer AS rows
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
WHERE e.status = 'queued'
  AND split_part(coalesce(e.recipient, l.email), '@', 1) ~ '[^[:ascii:]]'
GROUP BY e.mailbox_id
ORDER BY e.mailbox_id;

-- name: email_claim_state
-- Read back a claimed row's state (used only to recover after a lost connection).
SELECT status::text AS status, claim_token FROM outreach.emails WHERE id = %(email_id)s;

-- name: email_release_claimed
-- Rows claimed but never handed off (the batch stopped early, the SMTP server could not be
-- reached or logged into, the DKIM key could not be loaded) go back to the queue; the attempt did
-- not happen, so it is not counted. Guarded by our claim token like every transition. The sender
-- alone knows how far a stamped row got (the stamp comes before MAIL FROM, the body only after
-- the 354 go-ahead): it releases a stamped row only when its body never went out.
-- %(error)s (optional) says why, for last_error.
UPDATE outreach.emails e
SET status = 'queued', attempts = greatest(e.attempts - 1, 0), handed_over_at = NULL,
    last_error = coalesce(%(error)s::text, e.last_error), updated_at = now()
WHERE e.id = ANY (%(ids)s::bigint[]) AND e.status = 'sending' AND e.claim_token = %(claim_token)s
RETURNING e.id;

-- name: email_touch_claim
-- The handoff stamp and heartbeat, committed right before MAIL FROM of the row (the SMTP session
-- is already connected): proves the row is still ours (status and claim token), records that it
-- is being handed over (handed_over_at: from now on the reaper treats it as possibly sent), and
-- restarts the reaper's clock, so the reaper threshold only has to outlast one handoff (see
-- outreach.settings). The stamp is also where the pre-send checks are decided: it matches only
-- while the recipient is not suppressed and (marketing) the enrolment is still active, so an
-- opt-out or a stop that commits after the claim (while the SMTP session was being opened, the
-- message built) is still seen; one that commits after the stamp meets a handoff
-- already under way. %(address)s: the recipient in the Python normal form
-- (outreach.addresses.normalize_address; the SQL normaliser cannot map IDNA spellings).
-- No row back: an opt-out, a stop, or someone took the row; the sender looks which, and does not
-- send.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
UPDATE outreach.emails e
SET claimed_at = n.now, handed_over_at = n.now, updated_at = now()
FROM n
WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
  AND NOT outreach.is_suppressed(%(address)s, e.message_class::text)
  AND NOT EXISTS (SELECT 1 FROM outreach.enrollments en
                  WHERE en.campaign_id = e.campaign_id AND en.lead_id = e.lead_id
                    AND en.status <> 'active')
RETURNING e.id;

-- name: email_record_late_accept
-- The server accepted (2xx to the end of DATA) a row that is no longer ours to mark sent: the
-- reaper failed it as unconfirmed while we waited for the reply. Add the acceptance as evidence
-- (when, the reply, the Message-ID) to that unconfirmed row of the same claim token, never
-- changing its status (the unconfirmed guard trigger would refuse that anyway): a person
-- decides, and `outreach unconfirmed` shows it. The first evidence is kept.
UPDATE outreach.emails e
SET late_accepted_at = coalesce(%(now)s::timestamptz, now()), late_accept_reply = %(smtp_reply)s,
    late_accept_message_id = %(message_id)s, updated_at = now()
WHERE e.id = %(email_id)s AND e.status = 'failed' AND e.failure_kind = 'unconfirmed'
  AND e.claim_token = %(claim_token)s AND e.late_accepted_at IS NULL
RETURNING e.id;

-- name: email_cancel_stopped
-- The pre-send check's second half (next to the suppression check): a claimed row whose enrolment
-- is no longer active ends 'cancelled' without a handoff. Guarded by our claim token like every
-- transition of a claimed row; no row back: the enrolment is active (or the claim was taken, which
-- the heartbeat right before the handoff finds). Transactional rows have no enrolment.
UPDATE outreach.emails e
SET status = 'cancelled', updated_at = now(),
    last_error = format('enrolment %%s %%s by %%s before the handoff: %%s', en.id, en.status,
                        en.stopped_by, en.stop_reason)
FROM outreach.enrollments en
WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
  AND en.campaign_id = e.campaign_id AND en.lead_id = e.lead_id AND en.status <> 'active'
RETURNING e.id, en.status AS enrollment_status;

-- name: email_by_message_ids
-- Our sent emails whose Message-ID (send_log, without <>) is one of %(ids)s (lower-cased by the
-- caller: ours are lower-case), with what a reply or bounce needs to act on.
SELECT e.id, e.lead_id, e.campaign_id, e.mailbox_id, s.message_id, e.message_class,
       coalesce(l.email, e.recipient) AS email
FROM outreach.send_log s
JOIN outreach.emails e ON e.id = s.email_id
LEFT JOIN outreach.leads l ON l.id = e.lead_id
WHERE s.message_id = ANY (%(ids)s::text[]);

-- name: email_latest_sent_to
-- The latest email a mailbox (or any, %(mailbox_id)s NULL) sent to a lead's address: what a
-- bounce or complaint without our Message-ID is about.
SELECT e.id, e.lead_id, e.campaign_id, e.mailbox_id, e.message_class, l.email
FROM outreach.leads l
JOIN outreach.emails e ON e.lead_id = l.id
WHERE l.email = %(address)s AND e.status = 'sent'
  AND (%(mailbox_id)s::bigint IS NULL OR e.mailbox_id = %(mailbox_id)s::bigint)
ORDER BY e.sent_at DESC NULLS LAST, e.id DESC
LIMIT 1;

-- name: email_sent_sample
-- The first %(n)s campaign emails sent (the demo answers, bounces and unsubscribes these).
SELECT e.id, l.email, s.message_id, m.address AS mailbox_address
FROM outreach.send_log s
JOIN outreach.emails e ON e.id = s.email_id
JOIN outreach.leads l ON l.id = e.lead_id
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE e.message_class = 'marketing'
ORDER BY e.id
LIMIT %(n)s;

-- name: email_list_unconfirmed
-- Unconfirmed emails, by ids or by campaign and/or mailbox (NULL: any).
SELECT e.id, e.idempotency_key, e.last_error, e.claimed_by, e.claimed_at, e.attempts,
       e.handed_over_at, e.late_accepted_at, e.late_accept_reply, e.late_accept_message_id,
       coalesce(l.email, e.recipient) AS email, m.address AS mailbox_address,
       m.id AS mailbox_id, m.imap_conn_id, c.key AS campaign_key, e.message_class
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
LEFT JOIN outreach.campaigns c ON c.id = e.campaign_id
WHERE e.status = 'failed' AND e.failure_kind = 'unconfirmed'
  AND (%(ids)s::bigint[] IS NULL OR e.id = ANY (%(ids)s::bigint[]))
  AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
  AND (%(mailbox)s::text IS NULL OR m.address = lower(%(mailbox)s::text)
       OR m.id::text = %(mailbox)s::text)
ORDER BY e.id;

-- name: email_resolve_was_sent
-- A person saw it in Sent Items (or the server's late acceptance is evidence enough): record it
-- in the send log as operator-confirmed and mark the row sent, in one statement. The send log's
-- acceptance time is the server's late acceptance when there was one, else the claim time.
WITH done AS (
    UPDATE outreach.emails e
    SET status = 'sent', failure_kind = NULL,
        sent_at = coalesce(e.late_accepted_at, e.claimed_at, now()),
        last_error = NULL, updated_at = now()
    WHERE e.id = %(email_id)s AND e.status = 'failed' AND e.failure_kind = 'unconfirmed'
    RETURNING e.id, e.mailbox_id, e.sent_at
)
INSERT INTO outreach.send_log (email_id, mailbox_id, message_id, smtp_reply, source, accepted_at)
SELECT done.id, done.mailbox_id, %(message_id)s, %(note)s, 'operator', done.sent_at
FROM done
RETURNING email_id;

-- name: email_resolve_not_sent
-- A person checked: it did not go out. Back to the queue with the same idempotency key, so the
-- next attempt carries the same Message-ID.
UPDATE outreach.emails e
SET status = 'queued', failure_kind = NULL, scheduled_for = now(), updated_at = now(),
    handed_over_at = NULL, late_accepted_at = NULL, late_accept_reply = NULL,
    late_accept_message_id = NULL,
    last_error = 'operator: not sent, requeued (' || %(note)s || ')'
WHERE e.id = %(email_id)s AND e.status = 'failed' AND e.failure_kind = 'unconfirmed'
RETURNING e.id;

-- name: email_requeue_failed
-- An operator puts not-accepted failures back in the queue (outreach requeue / the
-- outreach_requeue DAG), after fixing what made every attempt fail (a relay down for an hour, a
-- full mailbox since emptied). Only failure_kind 'retries_exhausted': nothing of those was ever
-- accepted, so another attempt cannot send twice. Never 'unconfirmed' (may have gone out: its
-- own resolution) nor 'permanent'/'render' (they would fail the same way). Also 'sender_refused'
-- (0091: a 5xx whose reason is ours -- DMARC, a blocklist, policy -- once the operator fixed it;
-- refused, so nothing was accepted either). Guarded by status and
-- failure kind in one statement, so requeuing twice changes nothing; the row gets its full
-- attempts again (same idempotency key, so the same Message-ID), and the requeue is recorded
-- with who, why and the failure it came from. %(ids)s, %(campaign_key)s, %(mailbox)s: NULL = any.
WITH picked AS (
    SELECT e.id, e.failure_kind, e.last_error, e.attempts
    FROM outreach.emails e
    JOIN outreach.mailboxes m ON m.id = e.mailbox_id
    LEFT JOIN outreach.campaigns c ON c.id = e.campaign_id
    WHERE e.status = 'failed' AND e.failure_kind IN ('retries_exhausted', 'sender_refused')
      AND e.failure_kind = %(failure_kind)s
      AND (%(ids)s::bigint[] IS NULL OR e.id = ANY (%(ids)s::bigint[]))
      AND (%(campaign_key)s::text IS NULL OR c.key = %(campaign_key)s::text)
      AND (%(mailbox)s::text IS NULL OR m.address = lower(%(mailbox)s::text)
           OR m.id::text = %(mailbox)s::text)
    ORDER BY e.id
    FOR UPDATE OF e
),
done AS (
    UPDATE outreach.emails e
    SET status = 'queued', failure_kind = NULL, attempts = 0, handed_over_at = NULL,
        scheduled_for = now(), updated_at = now(),
        last_error = format('operator %%s requeued it (%%s); was: %%s', %(requeued_by)s::text,
                            %(reason)s::text, p.last_error)
    FROM picked p
    WHERE e.id = p.id AND e.status = 'failed' AND e.failure_kind IN ('retries_exhausted', 'sender_refused')
    RETURNING e.id
)
INSERT INTO outreach.email_requeues (email_id, failure_kind, last_error, attempts, requeued_by, reason)
SELECT p.id, p.failure_kind, p.last_error, p.attempts, %(requeued_by)s, %(reason)s
FROM picked p JOIN done d ON d.id = p.id
RETURNING email_id, attempts, last_error;

-- name: email_failure_state
-- The status and failure kind of emails by id (to say why a requested id was not requeued).
SELECT id, status::text AS status, failure_kind FROM outreach.emails
WHERE id = ANY (%(ids)s::bigint[]) ORDER BY id;

-- name: email_run_outcomes
-- What a send run did, read back from the ledger (not from its plan), and the operator alerts.
-- A send task stamps claimed_by with '<dag id>/<run id>/<task id>[<map index>]#try<n>'
-- (outreach.airflow_adapter.worker_for), so a run's rows are those whose claimed_by starts with
-- '<dag id>/<run id>/': a cleared or retried try is part of the same run. A row the run sent back
-- to the queue (4xx, released) counts as requeued until another run claims it.
--
-- Per mailbox, what the rows a run (or one task try: a full worker name) claimed are now.
-- left(…) = prefix, not LIKE: run ids contain '_' (a LIKE wildcard).
SELECT e.mailbox_id, m.label, m.display_name, m.address,
       count(*)::integer AS claimed,
       count(*) FILTER (WHERE e.status = 'sent')::integer AS sent,
       count(*) FILTER (WHERE e.failure_kind = 'unconfirmed')::integer AS unconfirmed,
       count(*) FILTER (WHERE e.status = 'failed' AND e.failure_kind <> 'unconfirmed')::integer AS failed,
       count(*) FILTER (WHERE e.status = 'queued')::integer AS requeued,
       count(*) FILTER (WHERE e.status = 'sending')::integer AS sending,
       count(*) FILTER (WHERE e.status = 'suppressed')::integer AS suppressed,
       coalesce(array_agg(e.id ORDER BY e.id) FILTER (WHERE e.failure_kind = 'unconfirmed'),
                '{}') AS unconfirmed_ids
FROM outreach.emails e
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE left(e.claimed_by, length(%(worker_prefix)s::text)) = %(worker_prefix)s::text
GROUP BY e.mailbox_id, m.label, m.display_name, m.address
ORDER BY e.mailbox_id;

-- name: email_unconfirmed_details
-- Unconfirmed emails (all, or %(ids)s) with what a person needs to decide: campaign and step,
-- mailbox name, claim and handoff, the last error, a late acceptance, the IMAP account whose
-- Sent folder may hold it (outreach.resolve.unconfirmed_details).
SELECT e.id, e.idempotency_key, e.message_class, e.template, e.last_error, e.claimed_at,
       e.claimed_by, e.handed_over_at, e.late_accepted_at, e.late_accept_reply,
       e.late_accept_message_id, coalesce(l.email, e.recipient) AS email, c.key AS campaign_key,
       st.position AS step, m.id AS mailbox_id, m.address AS mailbox_address, m.label,
       m.display_name, m.imap_conn_id
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
LEFT JOIN outreach.campaigns c ON c.id = e.campaign_id
LEFT JOIN outreach.sequence_steps st ON st.id = e.step_id
JOIN outreach.mailboxes m ON m.id = e.mailbox_id
WHERE e.status = 'failed' AND e.failure_kind = 'unconfirmed'
  AND (%(ids)s::bigint[] IS NULL OR e.id = ANY (%(ids)s::bigint[]))
ORDER BY e.id;

-- name: email_cancel_suppressed
-- Queued emails of addresses that are now suppressed (for their message class) are cancelled in
-- the same transaction as the suppression. Rows already 'sending' are left alone: the pre-send
-- check stops them.
UPDATE outreach.emails e
SET status = 'suppressed', updated_at = now()
WHERE e.status = 'queued'
  AND outreach.is_suppressed(coalesce(e.recipient, (SELECT l.email FROM outreach.leads l
                                                    WHERE l.id = e.lead_id)),
                             e.message_class)
RETURNING e.id;

-- name: email_unsubscribe_target
-- The email row an unsubscribe token names, with the address it went (or will go) to.
SELECT e.id, e.status::text AS status, coalesce(l.email, e.recipient) AS email, e.message_class
FROM outreach.emails e
LEFT JOIN outreach.leads l ON l.id = e.lead_id
WHERE e.id = %(email_id)s;

-- name: email_thread
-- Threaded follow-ups (migration 0012): a step with thread = true is sent as a reply in the first
-- step's thread, only when that first message really went out to the lead.
--
-- The thread a claimed email of a threaded step replies in: the messages of the same lead in the
-- same campaign that went out (a send-log entry: accepted by the server, or confirmed by an
-- operator from Sent Items) for step 1 and for every earlier threaded step, oldest first, with
-- the Subject as sent (NULL: sent before migration 0012, or confirmed by an operator) and step
-- 1's template and subject for that case. No row for position 1: step 1 was not sent to this lead
-- (it failed, was cancelled, or the row was made by hand), and the step is sent as a new message.
SELECT st.position, s.message_id, s.subject, coalesce(sv.template, st.template) AS template,
       coalesce(sv.subject, st.subject) AS subject_template
FROM outreach.emails e
JOIN outreach.sequence_steps cur ON cur.id = e.step_id
JOIN outreach.sequence_steps st ON st.campaign_id = cur.campaign_id
                               AND st.position < cur.position AND (st.position = 1 OR st.thread)
JOIN outreach.emails pe ON pe.lead_id = e.lead_id AND pe.step_id = st.id
JOIN outreach.send_log s ON s.email_id = pe.id
-- The earlier message's A/B variant (0126): its copy, not the step's.
LEFT JOIN outreach.step_variants sv ON sv.step_id = pe.step_id AND sv.name = pe.variant
WHERE e.id = %(email_id)s AND cur.thread
ORDER BY st.position;
