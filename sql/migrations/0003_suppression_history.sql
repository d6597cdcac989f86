-- 0003: suppression history (nothing is lost when a suppression is added or removed), and the
-- DKIM settings of a mailbox.

-- ---------------------------------------------------------------------------------------------
-- Suppression history
-- ---------------------------------------------------------------------------------------------

-- One row per suppression added or removed, written by triggers on outreach.suppressions, so
-- every path (CLI, do-not-contact import, one-click unsubscribe, a 5.1.x bounce, even a DELETE
-- typed into psql) leaves a trace. `outreach unsuppress` names who did it and why through the
-- transaction-local settings outreach.actor and outreach.note (see suppression_actor_set).
CREATE TABLE outreach.suppression_events (
    id             bigserial PRIMARY KEY,
    action         text NOT NULL,              -- 'suppress' (row added) or 'unsuppress' (row removed)
    suppression_id bigint NOT NULL,            -- outreach.suppressions.id (gone after an unsuppress)
    kind           text NOT NULL,              -- as in outreach.suppressions
    value          text NOT NULL,
    reason         text NOT NULL,              -- the suppression's reason (unsubscribed, bounced…)
    source         text NOT NULL,              -- the suppression's source
    actor          text,                       -- who: required for an unsuppress
    note           text,                       -- why: required for an unsuppress
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_suppression_events_action_check CHECK (action IN ('suppress', 'unsuppress')),
    CONSTRAINT outreach_suppression_events_kind_check CHECK (kind IN ('address', 'domain')),
    CONSTRAINT outreach_suppression_events_unsuppress_check CHECK (
        action <> 'unsuppress' OR (btrim(coalesce(actor, '')) <> '' AND btrim(coalesce(note, '')) <> '')
    )
);
CREATE INDEX outreach_suppression_events_value_idx
    ON outreach.suppression_events (kind, value, created_at);

-- Suppressions that exist already get their 'suppress' event, dated when they were added.
INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason, source,
                                         note, created_at)
SELECT 'suppress', id, kind, value, reason, source, 'recorded by migration 0003', created_at
FROM outreach.suppressions ORDER BY id;

CREATE FUNCTION outreach.suppressions_record_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason,
                                                 source, actor, note)
        VALUES ('suppress', NEW.id, NEW.kind, NEW.value, NEW.reason, NEW.source,
                nullif(current_setting('outreach.actor', true), ''),
                nullif(current_setting('outreach.note', true), ''));
        RETURN NEW;
    END IF;
    -- A removal without `outreach unsuppress` (psql, a script) still records the database role.
    INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason, source,
                                             actor, note)
    VALUES ('unsuppress', OLD.id, OLD.kind, OLD.value, OLD.reason, OLD.source,
            coalesce(nullif(current_setting('outreach.actor', true), ''), session_user::text),
            coalesce(nullif(current_setting('outreach.note', true), ''),
                     '(removed without outreach unsuppress)'));
    RETURN OLD;
END
$$;

CREATE TRIGGER outreach_suppressions_record_event
    AFTER INSERT OR DELETE ON outreach.suppressions
    FOR EACH ROW EXECUTE FUNCTION outreach.suppressions_record_event();

-- ---------------------------------------------------------------------------------------------
-- DKIM settings of a mailbox (from the mailbox file; the private key stays in the Airflow
-- connection named here, never in the database)
-- ---------------------------------------------------------------------------------------------

ALTER TABLE outreach.mailboxes
    ADD COLUMN dkim_selector text,             -- NULL: messages of this mailbox are not signed
    ADD COLUMN dkim_key_conn_id text,          -- Airflow connection holding the PEM private key
    ADD CONSTRAINT outreach_mailboxes_dkim_check
        CHECK ((dkim_selector IS NULL) = (dkim_key_conn_id IS NULL));
