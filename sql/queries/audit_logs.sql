-- The audit trail (outreach.audit_log, migration 0128): one append-only row per operator
-- decision, written in the decision's own transaction (outreach.audit.record).

-- name: audit_log_insert
-- Record one decision; %(details)s is jsonb (ids and counts, never a full address).
INSERT INTO outreach.audit_log (actor, via, action, target_kind, target_key, target_id,
                                campaign_key, reason, details, dag_id, run_id)
VALUES (%(actor)s, %(via)s, %(action)s, %(target_kind)s, %(target_key)s, %(target_id)s,
        %(campaign_key)s, %(reason)s, %(details)s, %(dag_id)s, %(run_id)s)
RETURNING id;

-- name: audit_log_list
-- The decisions of one campaign (%(campaign_key)s NULL: all), at or after %(since)s (NULL: any
-- time), newest first, at most %(limit)s.
SELECT id, at, actor, via, action, target_kind, target_key, target_id, campaign_key, reason,
       details, dag_id, run_id
FROM outreach.audit_log
WHERE (%(campaign_key)s::text IS NULL OR campaign_key = %(campaign_key)s::text)
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
ORDER BY at DESC, id DESC
LIMIT %(limit)s;
