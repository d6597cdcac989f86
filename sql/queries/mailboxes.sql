-- Mailbox status: pause, resume and their history, and the figures the health rules look at.
-- A status change is one guarded statement that also writes its history row, so a pause that
-- matched no row (already paused) records nothing. "Now" can be passed in (%(now)s).

-- name: mailbox_clear_transactional
-- Before a mailbox takes the transactional mark, every other mailbox loses it.
UPDATE outreach.mailboxes SET transactional = false, updated_at = now()
WHERE transactional AND address <> %(address)s
RETURNING id;

-- name: mailbox_upsert
-- Create or update a mailbox from the mailbox file; its pause status is never touched here.
-- freeze_from/freeze_to: the file's `freeze:` (the claim takes nothing then, 0137).
-- provider: the file's `provider:` (a campaign's provider_match, 0145).
INSERT INTO outreach.mailboxes AS m (address, display_name, label, smtp_conn_id, timezone, daily_cap,
                                     warmup_start, warmup_initial, warmup_days, warmup_increment,
                                     dkim_selector, dkim_key_conn_id, transactional, imap_conn_id,
                                     unsubscribe_imap_conn_id, freeze_from, freeze_to, provider)
VALUES (%(address)s, %(display_name)s, %(label)s, %(smtp_conn_id)s, %(timezone)s, %(daily_cap)s,
        %(warmup_start)s, %(warmup_initial)s, %(warmup_days)s, %(warmup_increment)s,
        %(dkim_selector)s, %(dkim_key_conn_id)s, %(transactional)s, %(imap_conn_id)s,
        %(unsubscribe_imap_conn_id)s, %(freeze_from)s, %(freeze_to)s, %(provider)s)
ON CONFLICT ON CONSTRAINT outreach_mailboxes_address_key DO UPDATE
SET display_name = excluded.display_name, label = excluded.label, smtp_conn_id = excluded.smtp_conn_id,
    timezone = excluded.timezone, daily_cap = excluded.daily_cap,
    warmup_start = excluded.warmup_start, warmup_initial = excluded.warmup_initial,
    warmup_days = excluded.warmup_days, warmup_increment = excluded.warmup_increment,
    dkim_selector = excluded.dkim_selector, dkim_key_conn_id = excluded.dkim_key_conn_id,
    transactional = excluded.transactional, imap_conn_id = excluded.imap_conn_id,
    unsubscribe_imap_conn_id = excluded.unsubscribe_imap_conn_id,
    freeze_from = excluded.freeze_from, freeze_to = excluded.freeze_to,
    provider = excluded.provider, updated_at = now()
RETURNING id;

-- name: mailbox_preflight_targets
-- Deliverability: what the DNS preflight checks before a send run.
--
-- Active mailboxes with their DKIM settings: the preflight checks each sending domain once per
-- selector. Paused mailboxes send nothing, so they are not checked.
SELECT id, address, split_part(address, '@', 2) AS domain, dkim_selector, dkim_key_conn_id,
       smtp_conn_id
FROM outreach.mailboxes
WHERE status = 'active'
ORDER BY id;

-- name: mailbox_lock
-- Serialises claims per mailbox for the rest of the transaction, so that the daily cap, read by
-- the next statement (with a fresh snapshot), holds however many senders claim at once.
-- FOR NO KEY UPDATE, not FOR UPDATE: it conflicts with another claim's lock and with any UPDATE
-- of the mailbox (pause, resume), but not with the KEY SHARE lock that the foreign key of a new
-- send_log row takes on its mailbox, so other senders' ledger writes (email_mark_sent) do not
-- wait for this claim to commit.
SELECT id, address, status FROM outreach.mailboxes WHERE id = %(mailbox_id)s FOR NO KEY UPDATE;

-- name: mailbox_remaining_today
-- What the mailbox may still start today (its local calendar day), and in this send run. This is
-- THE pacing rule; the code, the DAG docs and the README point here.
-- daily_limit, used, remaining: the warm-up/cap limit minus every email claimed today that went
-- out or may have gone out (sending, sent, unconfirmed). used is read from
-- outreach.mailbox_claim_counts, which triggers on outreach.emails keep equal to that count per
-- quarter-hour of claimed_at (migration 0081), so its cost does not grow with the day.
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
           date_bin(n.step, n.now, timestamptz '2000-01-01 00:00:00+00') AS slot_start,
           outreach.claim_quarter(d.local_day AT TIME ZONE m.timezone - interval '1 microsecond')
               + interval '15 minutes' AS first_quarter
    FROM outreach.mailboxes m
    CROSS JOIN n
    CROSS JOIN LATERAL (SELECT date_trunc('day', n.now AT TIME ZONE m.timezone) AS local_day) d
    WHERE m.id = %(mailbox_id)s
),
usage AS (
    -- used: the counter's quarter-hours from the first one that starts at or after day_start,
    -- plus the rows of a quarter-hour that day_start cuts (none in today's time zones).
    SELECT ((SELECT coalesce(sum(k.claimed), 0) FROM outreach.mailbox_claim_counts k
             WHERE k.mailbox_id = mb.id AND k.quarter >= mb.first_quarter)
            + (SELECT count(*) FROM outreach.emails e
               WHERE e.mailbox_id = mb.id AND e.claimed_at >= mb.day_start
                 AND e.claimed_at < mb.first_quarter
                 AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed'))
           )::integer AS used,
           (SELECT count(*) FROM outreach.emails e
            WHERE e.mailbox_id = mb.id AND e.claimed_at >= mb.slot_start
              AND e.claimed_at >= mb.day_start
              AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed'))::integer
               AS slot_used
    FROM mb
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

-- name: mailbox_by_id
SELECT id, address, status, label, display_name FROM outreach.mailboxes WHERE id = %(mailbox_id)s;

-- name: mailbox_find
-- A mailbox by id (%(mailbox_id)s) or by address (case-insensitive).
SELECT id, address, status, paused_reason, paused_at, paused_by, timezone, daily_cap
FROM outreach.mailboxes
WHERE id = %(mailbox_id)s::bigint OR address = lower(%(address)s::text);

-- name: mailbox_connections
-- A mailbox's Airflow connections (outreach mailbox check: outreach.logincheck), by id (%(mailbox_id)s) or address (case-insensitive).
SELECT id, address, smtp_conn_id, imap_conn_id
FROM outreach.mailboxes
WHERE id = %(mailbox_id)s::bigint OR address = lower(%(address)s::text);

-- name: mailbox_pause
-- Pause an active mailbox: claims refuse a paused mailbox (mailbox_lock + the status check in
-- outreach.send.claim), so it sends nothing until an operator resumes it. Guarded by
-- status = 'active': pausing a paused mailbox changes nothing and keeps the first reason.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
paused AS (
    UPDATE outreach.mailboxes m
    SET status = 'paused', paused_reason = %(reason)s, paused_at = n.now, paused_by = %(by)s,
        updated_at = n.now
    FROM n
    WHERE m.id = %(mailbox_id)s AND m.status = 'active'
    RETURNING m.id, m.paused_at
)
INSERT INTO outreach.mailbox_events (mailbox_id, event, actor, reason, created_at)
SELECT id, 'paused', %(by)s, %(reason)s, paused_at FROM paused
RETURNING mailbox_id, created_at;

-- name: mailbox_resume
-- Resume a paused mailbox. Guarded by status = 'paused'. Its backlog is not released at once:
-- the daily cap and the pacing of each send run still apply (mailbox_remaining_today).
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
resumed AS (
    UPDATE outreach.mailboxes m
    SET status = 'active', paused_reason = NULL, paused_at = NULL, paused_by = NULL,
        updated_at = n.now
    FROM n
    WHERE m.id = %(mailbox_id)s AND m.status = 'paused'
    RETURNING m.id, n.now
)
INSERT INTO outreach.mailbox_events (mailbox_id, event, actor, reason, created_at)
SELECT id, 'resumed', %(by)s, %(why)s, now FROM resumed
RETURNING mailbox_id, created_at;

-- name: mailbox_event_list
-- The pause/resume history of one mailbox, or of all (%(mailbox_id)s NULL), newest first.
SELECT ev.id, ev.mailbox_id, m.address, ev.event, ev.actor, ev.reason, ev.created_at
FROM outreach.mailbox_events ev
JOIN outreach.mailboxes m ON m.id = ev.mailbox_id
WHERE %(mailbox_id)s::bigint IS NULL OR ev.mailbox_id = %(mailbox_id)s::bigint
ORDER BY ev.created_at DESC, ev.id DESC;

-- name: mailbox_health_list
-- Every mailbox with its sending domain and the last time an operator resumed it. Automatic
-- rules ignore evidence that was already known at that moment: the operator decided on it.
SELECT m.id, m.address, m.status, lower(split_part(m.address, '@', 2)) AS domain,
       (SELECT max(ev.created_at) FROM outreach.mailbox_events ev
        WHERE ev.mailbox_id = m.id AND ev.event = 'resumed') AS resumed_at
FROM outreach.mailboxes m
ORDER BY m.id;

-- name: mailbox_bounce_counts
-- Per mailbox, over the last %(window)s (28 days) or since the last operator resume if later:
-- sends = emails handed off with a final verdict (sent, or failed permanently, also as
-- 'sender_refused'), and hard bounces
-- among them = a permanent failure at RCPT with a 5.1.x reply (outreach.send stores last_error as
-- 'RCPT 550 5.1.1 …'), a hard bounce the inbox reader recorded against the email (a DSN that
-- arrived after the server accepted it), or the address now suppressed with reason 'bounced';
-- complaints among them = an ARF complaint recorded against the email, or the address now
-- suppressed with reason 'complained' (the complaint-rate rule). Bounces and complaints count
-- addresses, not emails (issue 23: one bounce of a lead with two emails in the window is one),
-- and a hard bounce is also a failure of owner 'address' recorded in outreach.delivery_failures
-- (outreach.bounces). A sender block ('sender_refused', class 'sender_block') is no bounce.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now),
mb AS (
    SELECT m.id, m.address, m.status,
           greatest(n.now - %(window)s::interval,
                    (SELECT max(ev.created_at) FROM outreach.mailbox_events ev
                     WHERE ev.mailbox_id = m.id AND ev.event = 'resumed')) AS since
    FROM outreach.mailboxes m CROSS JOIN n
)
SELECT mb.id, mb.address, mb.status, mb.since,
       count(e.id)::integer AS sends,
       count(DISTINCT lower(coalesce(l.email, e.recipient))) FILTER (WHERE
           (e.failure_kind = 'permanent' AND e.last_error ~ '^RCPT 5[0-9][0-9] (.* )?5\.1\.[0-9]+')
           OR EXISTS (SELECT 1 FROM outreach.delivery_failures f
                      WHERE f.email_id = e.id AND f.owner = 'address')
           OR EXISTS (SELECT 1 FROM outreach.inbound_messages im
                      WHERE im.email_id = e.id AND im.class = 'hard_bounce')
           OR EXISTS (SELECT 1 FROM outreach.suppressions s
                      WHERE s.kind = 'address' AND s.value = lower(coalesce(l.email, e.recipient))
                        AND s.reason = 'bounced'))::integer AS hard_bounces,
       count(DISTINCT lower(coalesce(l.email, e.recipient))) FILTER (WHERE
           EXISTS (SELECT 1 FROM outreach.inbound_messages im
                   WHERE im.email_id = e.id AND im.class = 'complaint')
           OR EXISTS (SELECT 1 FROM outreach.suppressions s
                      WHERE s.kind = 'address' AND s.value = lower(coalesce(l.email, e.recipient))
                        AND s.reason = 'complained'))::integer AS complaints
FROM mb
LEFT JOIN outreach.emails e
       ON e.mailbox_id = mb.id AND e.claimed_at >= mb.since
      AND (e.status = 'sent' OR e.failure_kind IN ('permanent', 'sender_refused'))
LEFT JOIN outreach.leads l ON l.id = e.lead_id
GROUP BY mb.id, mb.address, mb.status, mb.since
ORDER BY mb.id;

-- name: mailbox_names
-- Every mailbox's label, display name and address (callers name it with logutil.mailbox_name).
SELECT id, label, display_name, address FROM outreach.mailboxes ORDER BY id;

-- name: mailbox_auto_pauses
-- Automatic pauses (by the spam-rate, bounce-rate, complaint-rate or sender-block rule) of the last 7 days, for their alerts.
SELECT ev.id, ev.mailbox_id, ev.actor, ev.reason, ev.created_at
FROM outreach.mailbox_events ev
WHERE ev.event = 'paused'
  AND ev.actor IN ('postmaster', 'bounce-rate', 'complaint-rate', 'sender-block')
  AND ev.created_at > now() - interval '7 days'
ORDER BY ev.id;
