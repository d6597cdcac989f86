-- 0101: campaign states enforced in the database (issue 24, item 1).
-- draft → awaiting_approval → active ⇄ paused → finished. Only an active campaign is queued
-- (email_queue_due) or claimed (outreach.claim_emails_v1); both already read c.status = 'active',
-- so a draft or awaiting campaign's rows, even inserted by hand, are never claimed. New campaigns
-- start as draft (the default; a campaign file may say `status: active`, campaign_upsert); the
-- campaigns that exist now are active or paused and keep that status.
ALTER TABLE outreach.campaigns DROP CONSTRAINT outreach_campaigns_status_check;
ALTER TABLE outreach.campaigns ADD CONSTRAINT outreach_campaigns_status_check
    CHECK (status IN ('draft', 'awaiting_approval', 'active', 'paused', 'finished'));
ALTER TABLE outreach.campaigns ALTER COLUMN status SET DEFAULT 'draft';
ALTER TABLE outreach.campaigns ADD COLUMN approved_at timestamptz;
ALTER TABLE outreach.campaigns ADD COLUMN approved_by text;

ALTER TABLE outreach.campaign_events DROP CONSTRAINT outreach_campaign_events_event_check;
ALTER TABLE outreach.campaign_events ADD CONSTRAINT outreach_campaign_events_event_check
    CHECK (event IN ('paused', 'resumed', 'submitted', 'approved', 'rejected', 'finished'));

-- The allowed transitions of outreach.campaigns.status; any other change (an UPDATE by hand
-- from draft straight to active) is refused.
CREATE FUNCTION outreach.campaigns_check_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) NOT IN (('draft', 'awaiting_approval'),
                                        ('awaiting_approval', 'active'),
                                        ('awaiting_approval', 'draft'),
                                        ('active', 'paused'), ('paused', 'active'),
                                        ('active', 'finished'), ('paused', 'finished')) THEN
        RAISE EXCEPTION 'campaign % cannot go from % to %', OLD.key, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_campaigns_status_check';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER outreach_campaigns_check_status
    BEFORE UPDATE OF status ON outreach.campaigns
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION outreach.campaigns_check_status();
