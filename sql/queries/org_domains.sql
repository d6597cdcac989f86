-- Organisations of email domains (outreach.org_domains, migration 0132): the per-company cap.

-- name: org_domain_missing
-- The email domains of leads that outreach.org_domains does not map yet (migration 0132), at
-- most %(limit)s of them: outreach.orgdomains fills them before rows are queued.
SELECT DISTINCT outreach.email_domain(l.email) AS domain
FROM outreach.leads l
WHERE outreach.email_domain(l.email) <> ''
  AND NOT EXISTS (SELECT 1 FROM outreach.org_domains d
                  WHERE d.domain = outreach.email_domain(l.email))
LIMIT %(limit)s;

-- name: org_domain_add
-- Map email domains to organisational domains; a domain already mapped keeps its row (the
-- free-mail rows of the migration, or an earlier run's). %(domains)s, %(orgs)s: parallel arrays.
INSERT INTO outreach.org_domains (domain, org, free_mail)
SELECT d.domain, d.org, coalesce(f.free_mail, false)
FROM unnest(%(domains)s::text[], %(orgs)s::text[]) AS d(domain, org)
LEFT JOIN outreach.org_domains f ON f.domain = d.org AND f.free_mail
ON CONFLICT (domain) DO NOTHING;
