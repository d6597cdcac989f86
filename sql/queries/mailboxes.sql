-- Mailbox status: pause, resume and their history, and the figures the health rules look at.
-- A status change is one guarded statement that also writes its history row, so a pause that
-- matched no row (already paused) records nothing. "Now" can be passed in (%(now)s).

-- name: mailbox_find
-- A mailbox by id (%(mailbox_id)s) or by address (case-insensitive).
SELECT id, address, status, paused_reason, paused_at, paused_by, timezone, daily_cap
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
-- sends = emails handed off with a final verdict (sent, or failed permanently), and hard bounces
-- among them = a permanent failure at RCPT with a 5.1.x reply (outreach.send stores last_error as
-- 'RCPT 550 5.1.1 …'), a hard bounce the inbox reader recorded against the email (a DSN that
-- arrived after the server accepted it), or the address now suppressed with reason 'bounced';
-- complaints among them = an ARF complaint recorded against the email, or the address now
-- suppressed with reason 'complained' (the complaint-rate rule).
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
       count(e.id) FILTER (WHERE
           (e.failure_kind = 'permanent' AND e.last_error ~ '^RCPT 5[0-9][0-9] (.* )?5\.1\.[0-9]+')
           OR EXISTS (SELECT 1 FROM outreach.inbound_messages im
                      WHERE im.email_id = e.id AND im.class = 'hard_bounce')
           OR EXISTS (SELECT 1 FROM outreach.suppressions s
                      WHERE s.kind = 'address' AND s.value = lower(coalesce(l.email, e.recipient))
                        AND s.reason = 'bounced'))::integer AS hard_bounces,
       count(e.id) FILTER (WHERE
           EXISTS (SELECT 1 FROM outreach.inbound_messages im
                   WHERE im.email_id = e.id AND im.class = 'complaint')
           OR EXISTS (SELECT 1 FROM outreach.suppressions s
                      WHERE s.kind = 'address' AND s.value = lower(coalesce(l.email, e.recipient))
                        AND s.reason = 'complained'))::integer AS complaints
FROM mb
LEFT JOIN outreach.emails e
       ON e.mailbox_id = mb.id AND e.claimed_at >= mb.since
      AND (e.status = 'sent' OR e.failure_kind = 'permanent')
LEFT JOIN outreach.leads l ON l.id = e.lead_id
GROUP BY mb.id, mb.address, mb.status, mb.since
ORDER BY mb.id;
