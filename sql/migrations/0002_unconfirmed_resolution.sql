-- 0002: operators resolve unconfirmed emails; nothing else may move them.
--
-- An unconfirmed row (status 'failed', failure_kind 'unconfirmed') may or may not have reached
-- the recipient. Only a person who checked Sent Items can say, so the database refuses any change
-- of such a row's status unless the transaction declared itself an operator resolution
-- (SET LOCAL outreach.resolution = 'operator'), which only the resolve queries do.

CREATE TABLE outreach.email_resolutions (
    id          bigserial PRIMARY KEY,
    email_id    bigint NOT NULL REFERENCES outreach.emails (id),
    decision    text NOT NULL,               -- 'was_sent' or 'not_sent'
    resolved_by text NOT NULL,
    note        text NOT NULL DEFAULT '',
    resolved_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_email_resolutions_decision_check CHECK (decision IN ('was_sent', 'not_sent')),
    CONSTRAINT outreach_email_resolutions_by_check CHECK (length(btrim(resolved_by)) > 0)
);
CREATE INDEX outreach_email_resolutions_email_idx ON outreach.email_resolutions (email_id);

CREATE FUNCTION outreach.emails_guard_unconfirmed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('outreach.resolution', true), '') <> 'operator' THEN
        RAISE EXCEPTION 'email % is unconfirmed: only an operator resolution may change it '
                        '(outreach resolve / the outreach_resolve_unconfirmed DAG)', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER outreach_emails_guard_unconfirmed
    BEFORE UPDATE ON outreach.emails
    FOR EACH ROW
    WHEN (OLD.failure_kind = 'unconfirmed'
          AND (NEW.status, NEW.failure_kind) IS DISTINCT FROM (OLD.status, OLD.failure_kind))
    EXECUTE FUNCTION outreach.emails_guard_unconfirmed();
