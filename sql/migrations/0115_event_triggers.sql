-- 0115: write outreach.events (0104) in the same transaction as each effect, by triggers on the
-- tables that record the effects, so no code path can forget one (issue 26, item 1). The kinds
-- and their payloads: the comments below. payload names rows by id and carries the coded bounce
-- reason and owner, step, source; never an address, a name, a reply's text or an operator's free
-- text (stop, pause and suppression reasons stay in their own rows, where retention and erasure
-- reach them).
CREATE FUNCTION outreach.record_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    e outreach.emails%ROWTYPE;
BEGIN
    IF TG_TABLE_NAME = 'send_log' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('sent', e.campaign_id, e.lead_id, NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'mailbox_id', NEW.mailbox_id,
                                   'source', NEW.source, 'send_log_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'inbound_messages' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES (CASE NEW.class WHEN 'reply' THEN 'replied' ELSE 'auto_replied' END,
                e.campaign_id, coalesce(NEW.lead_id, e.lead_id), NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'inbound_id', NEW.id,
                                   'mailbox_id', NEW.mailbox_id));
    ELSIF TG_TABLE_NAME = 'delivery_failures' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('bounced', e.campaign_id, e.lead_id, NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'reason', NEW.reason,
                                   'owner', NEW.owner, 'status', NEW.status,
                                   'mailbox_id', NEW.mailbox_id,
                                   'failure_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'suppression_events' THEN
        INSERT INTO outreach.events (kind, payload)
        VALUES (CASE WHEN NEW.action = 'unsuppress' THEN 'unsuppressed'
                     WHEN NEW.reason = 'unsubscribed' THEN 'unsubscribed'
                     WHEN NEW.reason = 'complained' THEN 'complained'
                     ELSE 'suppressed' END,
                jsonb_build_object('suppression_id', NEW.suppression_id,
                                   'suppression_kind', NEW.kind, 'source', NEW.source));
    ELSIF TG_TABLE_NAME = 'enrollments' THEN
        INSERT INTO outreach.events (kind, campaign_id, lead_id, payload)
        VALUES ('stopped', NEW.campaign_id, NEW.lead_id,
                jsonb_build_object('enrollment_id', NEW.id, 'status', NEW.status));
    ELSIF TG_TABLE_NAME = 'campaign_events' THEN
        INSERT INTO outreach.events (kind, campaign_id, payload)
        VALUES ('campaign_' || NEW.event, NEW.campaign_id,
                jsonb_build_object('campaign_event_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'mailbox_events' THEN
        INSERT INTO outreach.events (kind, payload)
        VALUES ('mailbox_' || NEW.event,
                jsonb_build_object('mailbox_id', NEW.mailbox_id, 'mailbox_event_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'email_resolutions' THEN
        SELECT * INTO e FROM outreach.emails WHERE id = NEW.email_id;
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('resolved', e.campaign_id, e.lead_id, NEW.email_id,
                jsonb_build_object('step_id', e.step_id, 'decision', NEW.decision,
                                   'resolution_id', NEW.id));
    ELSIF TG_TABLE_NAME = 'emails' THEN
        INSERT INTO outreach.events (kind, campaign_id, lead_id, email_id, payload)
        VALUES ('unconfirmed', NEW.campaign_id, NEW.lead_id, NEW.id,
                jsonb_build_object('step_id', NEW.step_id, 'mailbox_id', NEW.mailbox_id));
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER outreach_send_log_record_event
    AFTER INSERT ON outreach.send_log
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

-- Only a reply or an auto-reply tied to an email: bounces come from delivery_failures,
-- complaints and unsubscribes from suppression_events (one event per effect, whoever saw it).
CREATE TRIGGER outreach_inbound_messages_record_event
    AFTER INSERT ON outreach.inbound_messages
    FOR EACH ROW WHEN (NEW.class IN ('reply', 'auto_reply')
                       AND (NEW.email_id IS NOT NULL OR NEW.lead_id IS NOT NULL))
    EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_delivery_failures_record_event
    AFTER INSERT ON outreach.delivery_failures
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_suppression_events_record_event
    AFTER INSERT ON outreach.suppression_events
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

-- A stop by an operator or a source; a reply's stop is the 'replied' event above.
CREATE TRIGGER outreach_enrollments_record_event
    AFTER UPDATE OF status ON outreach.enrollments
    FOR EACH ROW WHEN (OLD.status = 'active' AND NEW.status = 'stopped')
    EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_campaign_events_record_event
    AFTER INSERT ON outreach.campaign_events
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_mailbox_events_record_event
    AFTER INSERT ON outreach.mailbox_events
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_email_resolutions_record_event
    AFTER INSERT ON outreach.email_resolutions
    FOR EACH ROW EXECUTE FUNCTION outreach.record_event();

CREATE TRIGGER outreach_emails_record_unconfirmed
    AFTER UPDATE OF status, failure_kind ON outreach.emails
    FOR EACH ROW WHEN (NEW.status = 'failed' AND NEW.failure_kind = 'unconfirmed'
                       AND OLD.failure_kind IS DISTINCT FROM 'unconfirmed')
    EXECUTE FUNCTION outreach.record_event();
