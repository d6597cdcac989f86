-- Emails: one row per (lead, sequence step). Every state change after the claim is one guarded
-- UPDATE: it names the status it expects and, for claimed rows, the claim token. A statement that
-- matches no row changes nothing, and the caller logs it.
-- "Now" can be passed in (%(now)s); NULL means the database clock.

-- name: email_queue_due
-- One set-based statement queues the due step of every eligible lead: step 1 once the lead is
-- enrolled (plus its delay), step n once step n-1 was sent delay_days ago. ON CONFLICT on
-- (lead, step) makes a second run, or a concurrent one, insert nothing. Suppressed addresses are
-- skipped by the one suppression function. scheduled_for is the next open slot of the campaign's
-- send window in the lead's time zone (falling back to the campaign's). Returns one row per
-- mailbox with how many were queued (never one row per email).
-- Run it after planner_bulk_joins (see there): planned with nested loops on a fresh database,
-- the NOT EXISTS rescans outreach.emails once per candidate while the same statement fills it.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
ins AS (
INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for)
SELECT en.lead_id, st.id, c.id, en.mailbox_id,
       outreach.next_send_slot(n.now, coalesce(l.timezone, c.timezone), c.send_days,
                               c.window_start, c.window_end)
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
  AND (st.position = 1 OR pe.status = 'sent')
  AND CASE WHEN st.position = 1 THEN en.enrolled_at ELSE pe.sent_at END
      + st.delay_days * interval '1 day' <= n.now
  AND NOT EXISTS (SELECT 1 FROM outreach.emails e WHERE e.lead_id = en.lead_id AND e.step_id = st.id)
  AND NOT outreach.is_suppressed(l.email)
  -- A lead lacking a field the step requires is not queued for it (report_missing_fields counts them).
  AND (st.requires = '{}' OR outreach.lead_missing_fields(l, st.requires) = '{}')
ON CONFLICT ON CONSTRAINT outreach_emails_lead_step_key DO NOTHING
RETURNING mailbox_id
)
SELECT mailbox_id, count(*)::integer AS queued FROM ins GROUP BY mailbox_id ORDER BY mailbox_id;

-- name: planner_bulk_joins
-- For the rest of this transaction, plan joins as hash or merge joins. email_queue_due is one
-- bulk INSERT … SELECT whose NOT EXISTS reads the table it inserts into: when the statistics say
-- outreach.emails is empty (a fresh database, the first run after a big import), the planner picks
-- a nested-loop anti join that scans outreach.emails once per candidate row, and that table grows
-- as the statement inserts — quadratic (EXPLAIN ANALYZE, 20,000 leads: 2.8 s with it, 0.6 s
-- without; 100,000 leads: 116 s). A hash anti join reads outreach.emails once.
SET LOCAL enable_nestloop = off;

-- name: mailbox_lock
-- Serialises claims per mailbox for the rest of the transaction, so that the daily cap, counted
-- by the next statement (with a fresh snapshot), holds however many senders claim at once.
-- FOR NO KEY UPDATE, not FOR UPDATE: it conflicts with another claim's lock and with any UPDATE
-- of the mailbox (pause, resume), but not with the KEY SHARE lock that the foreign key of a new
-- send_log row takes on its mailbox, so other senders' ledger writes (email_mark_sent) do not
-- wait for this claim to commit.
SELECT id, address, status FROM outreach.mailboxes WHERE id = %(mailbox_id)s FOR NO KEY UPDATE;

-- name: mailbox_remaining_today
-- What the mailbox may still start today (its local calendar day), and in this send run. This is
-- THE pacing rule; the code, the DAG docs and the README point here.
-- daily_limit, used, remaining: the warm-up/cap limit minus every email claimed today that went
-- out or may have gone out (sending, sent, unconfirmed).
-- Pacing, when %(interval)s (the send DAG's run interval) is given: a run is the interval slot
-- that contains now (date_bin: UTC multiples of the interval, like the DAG's cron schedule).
-- The day's send window spans window_start .. window_end: the earliest opening and the latest
-- close today of a send window of one of the mailbox's queued emails (lead time zone, falling
-- back to the campaign's). window_runs counts the slots of that FULL window, however late it is
-- now, and a day's sends are spread evenly over them:
--   run_share  = ceil(daily_limit / window_runs), the steady rate: no run claims more, so a
--                resume late in the window, or a backlog, never comes out faster than that;
--   due_by_now = ceil(daily_limit * run_number / window_runs), what an even spread has started
--                by the end of this slot (run_number: this slot's place in the window, from 1),
--                so the first sends of a long window are not bunched into its first runs.
-- run_left = min(remaining, run_share - slot_used, due_by_now - used): slot_used counts what this
-- slot already claimed (another mapped task, an earlier try of a retried task, an overlapping
-- run), so the share holds however many claimers there are. What does not fit today waits for
-- tomorrow; nothing carries over. Without an interval, run_left is simply what remains today.
-- runs_left: the slots from this one to window_end (for the plan's log line).
-- Gap, when %(gap_seconds)s > 0: handoff_fit is how many handoffs of this mailbox, each at least
-- gap × (1 + jitter) after the one before, can start before now + %(horizon)s, counting from
-- next_handoff_at (see mailbox_reserve_handoffs); a claim takes no more. NULL: no gap.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now, %(interval)s::interval AS step),
mb AS (
    SELECT m.id, m.status, outreach.mailbox_daily_limit(m, n.now) AS daily_limit, n.now, n.step,
           m.next_handoff_at,
           d.local_day AT TIME ZONE m.timezone AS day_start,
           (d.local_day + interval '1 day') AT TIME ZONE m.timezone AS day_end,
           date_bin(n.step, n.now, timestamptz '2000-01-01 00:00:00+00') AS slot_start
    FROM outreach.mailboxes m
    CROSS JOIN n
    CROSS JOIN LATERAL (SELECT date_trunc('day', n.now AT TIME ZONE m.timezone) AS local_day) d
    WHERE m.id = %(mailbox_id)s
),
usage AS (
    SELECT count(e.id)::integer AS used,
           count(e.id) FILTER (WHERE e.claimed_at >= mb.slot_start)::integer AS slot_used
    FROM mb
    LEFT JOIN outreach.emails e
           ON e.mailbox_id = mb.id AND e.claimed_at >= mb.day_start
          AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
),
horizon AS (
    -- Each distinct window (lead time zone, falling back to the campaign's) is evaluated once.
    SELECT min(s.opens) AS window_start, max(s.closes) AS window_end
    FROM mb
    LEFT JOIN LATERAL (
        SELECT DISTINCT coalesce(l.timezone, c.timezone) AS tz, c.send_days, c.window_start,
                        c.window_end
        FROM outreach.emails q
        JOIN outreach.campaigns c ON c.id = q.campaign_id
        JOIN outreach.leads l ON l.id = q.lead_id
        WHERE mb.step IS NOT NULL AND q.mailbox_id = mb.id AND q.status = 'queued'
          AND q.scheduled_for < mb.day_end AND c.status = 'active'
    ) w ON true
    LEFT JOIN LATERAL outreach.send_window_span(mb.day_start, mb.day_end, w.tz, w.send_days,
                                                w.window_start, w.window_end) s ON true
),
slots AS (
    SELECT mb.*, u.used, u.slot_used, greatest(0, mb.daily_limit - u.used) AS remaining,
           h.window_start, h.window_end,
           date_bin(mb.step, h.window_start, timestamptz '2000-01-01 00:00:00+00') AS first_slot
    FROM mb, usage u, horizon h
),
quota AS (
    SELECT slots.*,
           greatest(1, ceil(extract(epoch FROM window_end - first_slot)
                            / extract(epoch FROM step)))::integer AS window_runs,
           greatest(0, ceil(extract(epoch FROM window_end - slot_start)
                            / extract(epoch FROM step)))::integer AS runs_left,
           (extract(epoch FROM slot_start - first_slot) / extract(epoch FROM step))::integer + 1
               AS run_number
    FROM slots
),
share AS (
    SELECT quota.*,
           CASE WHEN step IS NULL THEN remaining
                ELSE ceil(daily_limit::numeric / window_runs)::integer END AS run_share,
           CASE WHEN step IS NULL THEN daily_limit
                WHEN window_end IS NULL OR window_end <= now OR run_number < 1 THEN 0
                ELSE ceil(daily_limit::numeric * least(run_number, window_runs) / window_runs)::integer
           END AS due_by_now
    FROM quota
)
SELECT id, status, daily_limit, used, remaining, window_start, window_end, window_runs, runs_left,
       run_number, run_share, due_by_now, slot_used,
       CASE WHEN step IS NULL THEN remaining
            ELSE greatest(0, least(remaining, run_share - slot_used, due_by_now - used)) END
           AS run_left,
       CASE WHEN coalesce(%(gap_seconds)s::double precision, 0) <= 0 THEN NULL
            ELSE greatest(0, floor(
                extract(epoch FROM now + %(horizon)s::interval
                                   - greatest(now, coalesce(next_handoff_at, now)))
                / (%(gap_seconds)s::double precision * (1 + %(gap_jitter)s::double precision))
            ) + 1)::integer
       END AS handoff_fit
FROM share;

-- name: mailbox_reserve_handoffs
-- Reserve the handoff moments of the %(rows)s rows a claim just took, in claim order, and move
-- the mailbox's next_handoff_at past them. Run in the claim's transaction, under its mailbox
-- lock, so every claimer of the mailbox extends one chain. The first row may go at
-- max(now, next_handoff_at); each next one a gap later, the gap being
-- %(gap_seconds)s × (1 + %(gap_jitter)s × random()) — a minimum gap with jitter, so a mailbox's
-- sends never come at a machine's even beat (the commercial tools space them by minutes).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
base AS (
    SELECT greatest(n.now, coalesce(m.next_handoff_at, n.now)) AS at
    FROM outreach.mailboxes m CROSS JOIN n
    WHERE m.id = %(mailbox_id)s
),
gaps AS (
    SELECT k, %(gap_seconds)s::double precision
              * (1 + %(gap_jitter)s::double precision * random()) AS seconds
    FROM generate_series(1, %(rows)s::integer) AS k
),
chain AS (
    SELECT k,
           base.at + make_interval(secs => coalesce(sum(seconds) OVER (ORDER BY k ROWS BETWEEN
                                      UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS not_before,
           base.at + make_interval(secs => sum(seconds) OVER (ORDER BY k)) AS next_at
    FROM gaps CROSS JOIN base
),
moved AS (  -- a data-modifying CTE runs once, whether the SELECT below reads it or not
    UPDATE outreach.mailboxes m SET next_handoff_at = (SELECT max(next_at) FROM chain)
    WHERE m.id = %(mailbox_id)s
    RETURNING m.id
)
SELECT k, not_before FROM chain ORDER BY k;

-- name: email_claim_batch
-- The claim is this one statement: lock up to %(limit)s due rows of one mailbox that no other
-- sender holds (SKIP LOCKED), stamp a fresh claim token, claimed_at and attempts + 1, and return
-- everything needed to build the messages. Rows outside their send window stay queued.
-- The locking SELECT is a MATERIALIZED CTE, evaluated exactly once: written inline as
-- `e.id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)` the planner may run it as a subplan
-- rescanned per row, and each rescan skips the rows this statement already updated and returns
-- the next n — a claim of the whole queue (seen here after migration 0006 changed the plan).
-- FOR NO KEY UPDATE (the lock the UPDATE takes anyway): two claims still skip each other's rows,
-- and rows that reference a claimed email (its send_log row) are not held up by the claim.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
picked AS MATERIALIZED (
    SELECT q.id
    FROM outreach.emails q
    JOIN outreach.campaigns c ON c.id = q.campaign_id
    JOIN outreach.leads l ON l.id = q.lead_id
    CROSS JOIN n
    WHERE q.status = 'queued'
      AND q.mailbox_id = %(mailbox_id)s
      AND q.scheduled_for <= n.now
      AND c.status = 'active'
      AND outreach.next_send_slot(n.now, coalesce(l.timezone, c.timezone), c.send_days,
                                  c.window_start, c.window_end) = n.now
    ORDER BY q.scheduled_for, q.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF q SKIP LOCKED
),
claimed AS (
    UPDATE outreach.emails e
    SET status = 'sending', claim_token = %(claim_token)s, claimed_at = n.now,
        claimed_by = %(claimed_by)s, attempts = e.attempts + 1, updated_at = n.now
    FROM n
    WHERE e.status = 'queued' AND e.id IN (SELECT id FROM picked)
    RETURNING e.*
)
SELECT cl.id, cl.claim_token, cl.attempts, cl.idempotency_key, cl.lead_id, cl.step_id,
       cl.message_class, l.email, l.first_name, l.last_name, l.company, l.title, l.custom,
       st.position AS step_position, st.template, st.subject, st.thread AS step_thread,
       c.key AS campaign_key, c.name AS campaign_name,
       m.id AS mailbox_id, m.address AS mailbox_address, m.display_name AS mailbox_name,
       m.smtp_conn_id, m.dkim_selector, m.dkim_key_conn_id
FROM claimed cl
JOIN outreach.leads l ON l.id = cl.lead_id
JOIN outreach.sequence_steps st ON st.id = cl.step_id
JOIN outreach.campaigns c ON c.id = cl.campaign_id
JOIN outreach.mailboxes m ON m.id = cl.mailbox_id
ORDER BY cl.scheduled_for, cl.id;

-- name: email_claim_transactional
-- The claim of transactional rows: the same one statement (FOR NO KEY UPDATE SKIP LOCKED, a fresh claim
-- token, claimed_at and attempts + 1), over due transactional rows of one active mailbox. No send
-- window, daily cap or warm-up holds them back (mail the recipient is waiting for); a paused
-- mailbox sends nothing. Returns the columns email_claim_batch returns, for the same send path.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
picked AS MATERIALIZED (  -- evaluated once: see email_claim_batch
    SELECT q.id
    FROM outreach.emails q
    JOIN outreach.mailboxes mb ON mb.id = q.mailbox_id
    CROSS JOIN n
    WHERE q.status = 'queued' AND q.message_class = 'transactional'
      AND q.mailbox_id = %(mailbox_id)s AND q.scheduled_for <= n.now
      AND mb.status = 'active'
    ORDER BY q.scheduled_for, q.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF q SKIP LOCKED
),
claimed AS (
    UPDATE outreach.emails e
    SET status = 'sending', claim_token = %(claim_token)s, claimed_at = n.now,
        claimed_by = %(claimed_by)s, attempts = e.attempts + 1, updated_at = n.now
    FROM n
    WHERE e.status = 'queued' AND e.id IN (SELECT id FROM picked)
    RETURNING e.*
)
SELECT cl.id, cl.claim_token, cl.attempts, cl.idempotency_key, cl.lead_id, cl.step_id,
       cl.message_class, cl.recipient AS email, cl.template, cl.context, cl.delivery_key,
       m.id AS mailbox_id, m.address AS mailbox_address, m.display_name AS mailbox_name,
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
-- kept (a threaded follow-up replies with "Re: " + it, see email_thread).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
done AS (
    UPDATE outreach.emails e
    SET status = 'sent', sent_at = n.now, last_error = NULL, updated_at = n.now
    FROM n
    WHERE e.id = %(email_id)s AND e.status = 'sending' AND e.claim_token = %(claim_token)s
    RETURNING e.id, e.mailbox_id
)
INSERT INTO outreach.send_log (email_id, mailbox_id, message_id, smtp_reply, accepted_at,
                               subject)
SELECT done.id, done.mailbox_id, %(message_id)s, %(smtp_reply)s, n.now, %(subject)s FROM done, n
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
-- Rows left 'sending' longer than the threshold (a killed worker, a lost connection). The handoff
-- stamp (handed_over_at, committed right before MAIL FROM of the row, see email_touch_claim)
-- says what they may be:
-- * never handed over: the server never saw them. Back to the queue, the attempt not counted
--   (the claim counted it), due as before.
-- * handed over: they may or may not have gone out. Failed as unconfirmed, for a person.
-- One statement, guarded by status and the claim age. Under READ COMMITTED an UPDATE that meets
-- a row a sender changed concurrently re-checks the WHERE and recomputes SET on the newest row
-- version, so a row that finished, or was stamped or touched meanwhile (the stamp also restarts
-- claimed_at), is judged on what it is now, never on this statement's snapshot.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
UPDATE outreach.emails e
SET status = CASE WHEN e.handed_over_at IS NULL THEN 'queued' ELSE 'failed' END
                 ::outreach.email_status,
    failure_kind = CASE WHEN e.handed_over_at IS NULL THEN NULL ELSE 'unconfirmed' END,
    attempts = CASE WHEN e.handed_over_at IS NULL THEN greatest(e.attempts - 1, 0)
                    ELSE e.attempts END,
    last_error = CASE WHEN e.handed_over_at IS NULL THEN
                     format('reaper: left sending for over %%s (claimed by %%s at %%s) and never '
                            'handed over to the SMTP server; back in the queue, attempt not counted',
                            %(threshold)s::interval, e.claimed_by, e.claimed_at)
                 ELSE
                     format('left sending for over %%s (claimed by %%s, handed over at %%s): '
                            'check Sent Items before doing anything',
                            %(threshold)s::interval, e.claimed_by, e.handed_over_at)
                 END,
    updated_at = n.now
FROM n
WHERE e.status = 'sending' AND e.claimed_at < n.now - %(threshold)s::interval
RETURNING e.id, e.mailbox_id, e.claimed_by, e.claimed_at, e.handed_over_at,
          (e.status = 'failed') AS unconfirmed;

-- name: email_plan_mailboxes
-- Mailboxes with due rows, for the send plan: how many are due now (all mailboxes, or one).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
SELECT m.id AS mailbox_id, m.address, m.status, count(e.id)::integer AS due
FROM outreach.mailboxes m
JOIN outreach.emails e ON e.mailbox_id = m.id AND e.status = 'queued'
                       AND e.message_class = 'marketing'
CROSS JOIN n
WHERE e.scheduled_for <= n.now
  AND (%(mailbox_id)s::bigint IS NULL OR m.id = %(mailbox_id)s::bigint)
GROUP BY m.id, m.address, m.status
ORDER BY m.id;

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

-- name: mailbox_by_id
SELECT id, address, status, label, display_name FROM outreach.mailboxes WHERE id = %(mailbox_id)s;

-- name: email_touch_claim
-- The handoff stamp and heartbeat, committed right before MAIL FROM of the row (the SMTP session
-- is already connected): proves the row is still ours (status and claim token), records that it
-- is being handed over (handed_over_at: from now on the reaper treats it as possibly sent), and
-- restarts the reaper's clock, so the reaper threshold only has to outlast one handoff (see
-- outreach.settings). The stamp is also where the pre-send checks are decided: it matches only
-- while the recipient is not suppressed and (marketing) the enrolment is still active, so an
-- opt-out or a stop that commits after the sender's first look (while the SMTP session was being
-- opened, the message built) is still seen; one that commits after the stamp meets a handoff
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
