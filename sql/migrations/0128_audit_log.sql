-- 0128: the audit trail (issue 27, item 2). One append-only row per operator decision (suppress,
-- unsuppress, pause, resume, resolve, requeue, stop, submit, approve, reject, erase, settings):
-- who (the Airflow user, or 'os:<user>' for the CLI), through what (via), when, what (the target
-- and its campaign), why, and the Airflow run. outreach.audit.record writes it in the decision's
-- own transaction, so there is no decision without its row and no row without its decision.
-- Never a full email address: target_key and details hold masked addresses, ids and counts.
-- Append-only: a trigger refuses UPDATE, DELETE and TRUNCATE (the owner may still drop the
-- trigger; an audit trail that must survive its owner belongs in a second system).
CREATE TABLE outreach.audit_log (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    via          text NOT NULL,
    action       text NOT NULL,
    target_kind  text NOT NULL,
    target_key   text,
    target_id    bigint,
    campaign_key text,
    reason       text,
    details      jsonb NOT NULL DEFAULT '{}'::jsonb,
    dag_id       text,
    run_id       text,
    CONSTRAINT outreach_audit_log_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_audit_log_via_check CHECK (via IN ('cli', 'airflow', 'page', 'api')),
    CONSTRAINT outreach_audit_log_action_check CHECK (action IN (
        'suppress', 'unsuppress', 'pause', 'resume', 'resolve', 'requeue', 'stop', 'submit',
        'approve', 'reject', 'erase', 'settings')),
    CONSTRAINT outreach_audit_log_target_kind_check CHECK (target_kind IN (
        'suppression', 'campaign', 'mailbox', 'email', 'enrollment', 'lead', 'settings'))
);
CREATE INDEX outreach_audit_log_campaign_idx ON outreach.audit_log (campaign_key, at);
CREATE INDEX outreach_audit_log_at_idx ON outreach.audit_log (at);

-- Refuses every change to an audit row (UPDATE, DELETE) and TRUNCATE of the table.
CREATE FUNCTION outreach.audit_log_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outreach.audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER outreach_audit_log_append_only
    BEFORE UPDATE OR DELETE ON outreach.audit_log
    FOR EACH ROW EXECUTE FUNCTION outreach.audit_log_refuse_change();

CREATE TRIGGER outreach_audit_log_no_truncate
    BEFORE TRUNCATE ON outreach.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION outreach.audit_log_refuse_change();
