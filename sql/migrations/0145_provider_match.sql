-- 0145: provider match at enrolment (issue 25, item 3: "an optional provider match at enrolment
-- (Google mailboxes write to Google recipients when one is available)").
--
-- campaigns.provider_match (the campaign file's `provider_match: true`) makes the enrolment
-- (enrollment_insert_staged) give a new lead a mailbox of the lead's own mailbox provider
-- (outreach.email_provider: the MX cache of 0141) while that mailbox is active, not frozen and
-- within its share of the campaign's leads; every other lead fills the mailboxes' shares left.
-- A mailbox's provider is mailboxes.provider (the mailbox file's `provider:`), else its own
-- domain's cached MX provider. Off (the default): the round robin by lead id, as before.

ALTER TABLE outreach.campaigns ADD COLUMN provider_match boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN outreach.campaigns.provider_match IS
    'enrolment prefers a mailbox of the lead''s mailbox provider (enrollment_insert_staged)';

ALTER TABLE outreach.mailboxes ADD COLUMN provider text;
ALTER TABLE outreach.mailboxes ADD CONSTRAINT outreach_mailboxes_provider_check
    CHECK (provider IN ('google', 'microsoft', 'yahoo', 'apple', 'other'));
COMMENT ON COLUMN outreach.mailboxes.provider IS
    'the mailbox''s own provider as configured; NULL: its domain''s MX provider (outreach.mx_providers)';
