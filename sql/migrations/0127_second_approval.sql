-- 0127: a second approval when an approved campaign's content changes (issue 24, item 4).
-- outreach.campaigns.content_version is the campaign's content as last synced (the steps'
-- content versions with their delays and `requires`, outreach.content.campaign_content_version);
-- approved_content_version is the one a person approved (campaign_approve). When a sync writes
-- another content version for an active or paused campaign, trigger
-- outreach_campaigns_content_changed moves it to awaiting_approval in the same statement (and
-- writes its 'submitted' history row): nothing new is queued (email_queue_due) or claimed
-- (outreach.claim_emails_v*, both read c.status = 'active') until it is approved again.
-- A campaign created active (`status: active` in its file) or approved before this migration
-- has no approved version yet: its first content version known is taken as approved, so
-- existing campaigns keep running after the upgrade.
ALTER TABLE outreach.campaigns ADD COLUMN content_version text;
ALTER TABLE outreach.campaigns ADD COLUMN approved_content_version text;

CREATE OR REPLACE FUNCTION outreach.campaigns_check_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status, NEW.status) NOT IN (('draft', 'awaiting_approval'),
                                        ('awaiting_approval', 'active'),
                                        ('awaiting_approval', 'draft'),
                                        ('active', 'paused'), ('paused', 'active'),
                                        ('active', 'awaiting_approval'),
                                        ('paused', 'awaiting_approval'),
                                        ('active', 'finished'), ('paused', 'finished')) THEN
        RAISE EXCEPTION 'campaign % cannot go from % to %', OLD.key, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'outreach_campaigns_status_check';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION outreach.campaigns_content_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status NOT IN ('active', 'paused') OR NEW.content_version IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.approved_content_version IS NULL THEN
        NEW.approved_content_version := NEW.content_version;
    ELSIF TG_OP = 'UPDATE' AND NEW.content_version <> NEW.approved_content_version THEN
        NEW.status := 'awaiting_approval';
        INSERT INTO outreach.campaign_events (campaign_id, event, actor, reason)
        VALUES (NEW.id, 'submitted', 'outreach',
                format('content changed while %s (version %s, approved %s): a second approval '
                       'is needed', OLD.status, NEW.content_version,
                       NEW.approved_content_version));
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER outreach_campaigns_content_changed
    BEFORE INSERT OR UPDATE OF content_version ON outreach.campaigns
    FOR EACH ROW EXECUTE FUNCTION outreach.campaigns_content_changed();
