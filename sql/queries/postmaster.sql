-- Google Postmaster Tools figures: stored one row per domain / metric (/ feedback loop) / day.

-- name: postmaster_domain_list
-- The sending domains (the From domain of each mailbox) and their mailboxes' ids.
SELECT lower(split_part(address, '@', 2)) AS domain, array_agg(id ORDER BY id) AS mailbox_ids
FROM outreach.mailboxes
GROUP BY 1
ORDER BY 1;

-- name: postmaster_stat_upsert
-- Store one query's days in one statement: a day with a figure is known, a day the API left out
-- is unknown (value NULL, has_data false) — never 0 percent. Re-runs change nothing; late data turns an
-- unknown day into a known one; an unknown day never overwrites a known figure. updated_at moves
-- only when the figure changes, so "known before the operator resumed" stays true on re-runs.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
INSERT INTO outreach.postmaster_stats AS s (domain, metric, feedback_loop_id, day, value, has_data,
                                            fetched_at, updated_at)
SELECT %(domain)s, r.metric, r.feedback_loop_id, r.day, r.value, r.value IS NOT NULL, n.now, n.now
FROM unnest(%(metrics)s::text[], %(feedback_loop_ids)s::text[], %(days)s::date[],
            %(values)s::double precision[]) AS r (metric, feedback_loop_id, day, value)
CROSS JOIN n
ON CONFLICT ON CONSTRAINT outreach_postmaster_stats_pkey DO UPDATE
SET value = excluded.value, has_data = excluded.has_data, fetched_at = excluded.fetched_at,
    updated_at = CASE WHEN s.value IS DISTINCT FROM excluded.value THEN excluded.updated_at
                      ELSE s.updated_at END
WHERE excluded.has_data
RETURNING s.metric, s.feedback_loop_id, s.day, s.has_data;

-- name: postmaster_stat_latest_known
-- The latest day WITH data of every domain / metric / feedback loop: unknown days are skipped,
-- not read as 0 percent.
SELECT DISTINCT ON (domain, metric, feedback_loop_id)
       domain, metric, feedback_loop_id, day, value, updated_at
FROM outreach.postmaster_stats
WHERE has_data
ORDER BY domain, metric, feedback_loop_id, day DESC;

-- name: postmaster_compliance_upsert
WITH n AS (SELECT coalesce(%(now)s::timestamptz, now()) AS now)
INSERT INTO outreach.postmaster_compliance AS pc (domain, day, needs_work, status, fetched_at)
SELECT %(domain)s, (n.now AT TIME ZONE 'UTC')::date, %(needs_work)s, %(status)s, n.now FROM n
ON CONFLICT ON CONSTRAINT outreach_postmaster_compliance_pkey DO UPDATE
SET needs_work = excluded.needs_work, status = excluded.status, fetched_at = excluded.fetched_at
RETURNING domain, day;
