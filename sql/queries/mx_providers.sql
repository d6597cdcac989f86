-- Mailbox providers of email domains from their MX records (outreach.mx_providers, migration
-- 0141): the provider cap of the claim.

-- name: mx_provider_stale
-- The email domains of queued campaign rows whose provider is not cached, or whose entry ends
-- before %(until)s, at most %(limit)s of them: outreach.mxproviders looks them up (the claim
-- never does; an unknown or expired domain is 'other' there). Also the domain of each mailbox
-- without a configured provider in a campaign with provider_match (0145: the enrolment matches
-- a lead's provider to the mailbox's own; a few rows).
SELECT d.domain
FROM (SELECT outreach.email_domain(l.email) AS domain
      FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id
      WHERE e.status = 'queued' AND e.message_class = 'marketing'
      UNION
      SELECT outreach.email_domain(m.address)
      FROM outreach.mailboxes m
      WHERE m.provider IS NULL
        AND EXISTS (SELECT 1 FROM outreach.campaign_mailboxes cm
                    JOIN outreach.campaigns c ON c.id = cm.campaign_id
                    WHERE cm.mailbox_id = m.id AND c.provider_match)) d
LEFT JOIN outreach.mx_providers m ON m.domain = d.domain
WHERE d.domain <> '' AND (m.domain IS NULL OR m.expires_at < %(until)s)
ORDER BY m.expires_at NULLS FIRST, d.domain
LIMIT %(limit)s;

-- name: mx_provider_put
-- Cache the providers of domains until their records expire (%(domains)s, %(providers)s,
-- %(ttls)s seconds: parallel arrays), replacing older entries; %(now)s: when they were looked up.
INSERT INTO outreach.mx_providers (domain, provider, expires_at, checked_at)
SELECT d.domain, d.provider, %(now)s::timestamptz + make_interval(secs => d.ttl), %(now)s
FROM unnest(%(domains)s::text[], %(providers)s::text[], %(ttls)s::integer[]) AS d(domain, provider, ttl)
ON CONFLICT (domain) DO UPDATE
SET provider = excluded.provider, expires_at = excluded.expires_at, checked_at = excluded.checked_at;
