-- 0006: transactional mail (a signup welcome email…) with a durable delivery key.
--
-- A transactional email is a row of outreach.emails like any other, so it shares the claim, the
-- guarded transitions, the send log (one entry per row), the reaper, the unconfirmed rule and the
-- operator resolution. What differs: it belongs to no lead, step or campaign; it names its
-- recipient, template and context itself; and it carries the application's delivery key, UNIQUE,
-- so enqueuing the same key again (an HTTP retry, a replayed job) can never make a second row.
-- The Message-ID comes from the key: idempotency_key = md5('outreach-transactional:' || key).

ALTER TABLE outreach.emails
    ADD COLUMN message_class text NOT NULL DEFAULT 'marketing',
    ADD COLUMN delivery_key  text,            -- the application's key (transactional only)
    ADD COLUMN recipient     text,            -- the To address (transactional only)
    ADD COLUMN template      text,            -- include/templates/<template>.{subject,txt,html}.j2
    ADD COLUMN context       jsonb,           -- the template's variables (transactional only)
    ALTER COLUMN lead_id DROP NOT NULL,
    ALTER COLUMN step_id DROP NOT NULL,
    ALTER COLUMN campaign_id DROP NOT NULL,
    ADD CONSTRAINT outreach_emails_message_class_check
        CHECK (message_class IN ('marketing', 'transactional')),
    -- A marketing row is exactly one (lead, step) of a campaign; a transactional row is exactly
    -- one delivery key with its recipient, template and context, and no lead, step or campaign.
    ADD CONSTRAINT outreach_emails_class_shape_check CHECK (
        CASE message_class
            WHEN 'marketing' THEN lead_id IS NOT NULL AND step_id IS NOT NULL
                                  AND campaign_id IS NOT NULL AND delivery_key IS NULL
                                  AND recipient IS NULL AND template IS NULL AND context IS NULL
            ELSE lead_id IS NULL AND step_id IS NULL AND campaign_id IS NULL
                 AND delivery_key IS NOT NULL AND length(delivery_key) BETWEEN 1 AND 200
                 AND recipient IS NOT NULL AND template ~ '^[a-z0-9][a-z0-9_]{0,62}$'
                 AND jsonb_typeof(context) = 'object'
        END),
    -- The delivery key, recipient, template and context of a row are as fixed as its idempotency
    -- key: they are what the application asked for.
    ADD CONSTRAINT outreach_emails_delivery_key_message_id_check CHECK (
        delivery_key IS NULL
        OR idempotency_key = md5('outreach-transactional:' || delivery_key)::uuid);

CREATE FUNCTION outreach.emails_keep_transactional_request() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the delivery key, recipient, template and context of email % never change', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER outreach_emails_keep_transactional_request
    BEFORE UPDATE OF delivery_key, recipient, template, context, message_class ON outreach.emails
    FOR EACH ROW
    WHEN ((OLD.delivery_key, OLD.recipient, OLD.template, OLD.context, OLD.message_class)
          IS DISTINCT FROM (NEW.delivery_key, NEW.recipient, NEW.template, NEW.context, NEW.message_class))
    EXECUTE FUNCTION outreach.emails_keep_transactional_request();

-- One row per delivery key. Partial: marketing rows (no key) add nothing to it, so marking a
-- campaign email sent touches one index fewer.
CREATE UNIQUE INDEX outreach_emails_delivery_key_key ON outreach.emails (delivery_key)
    WHERE delivery_key IS NOT NULL;

-- The transactional claim reads only due transactional rows of a mailbox, however many
-- marketing rows are queued beside them.
CREATE INDEX outreach_emails_transactional_queued_idx
    ON outreach.emails (mailbox_id, scheduled_for, id)
    WHERE status = 'queued' AND message_class = 'transactional';

-- The mailbox that sends transactional mail when the caller names none (at most one).
ALTER TABLE outreach.mailboxes ADD COLUMN transactional boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX outreach_mailboxes_one_transactional_idx
    ON outreach.mailboxes (transactional) WHERE transactional;

-- ---------------------------------------------------------------------------------------------
-- The one suppression function now takes the message class.
-- Marketing mail honours every suppression. Transactional mail (a receipt, a welcome email, a
-- password reset: mail the recipient asked for by acting) ignores the marketing opt-outs —
-- an unsubscribe or a spam complaint about marketing — but honours hard bounces, manual blocks and
-- do-not-contact entries (Gmail sender guidelines: one-click unsubscribe applies to marketing
-- and subscribed messages, not transactional ones).
-- ---------------------------------------------------------------------------------------------

DROP FUNCTION outreach.is_suppressed(text);

CREATE FUNCTION outreach.is_suppressed(address text, message_class text DEFAULT 'marketing')
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT EXISTS (
        SELECT 1 FROM outreach.suppressions s
        WHERE ((s.kind = 'address' AND s.value = lower(address))
               OR (s.kind = 'domain' AND s.value = lower(split_part(address, '@', 2))))
          AND (message_class = 'marketing'
               OR s.reason NOT IN ('unsubscribed', 'complained'))
    )
$$;

-- ---------------------------------------------------------------------------------------------
-- Enqueue: called inside the application's own transaction (an outbox), so its user row and
-- this email row commit together or not at all.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION outreach.enqueue_transactional(
    p_delivery_key text, p_recipient text, p_template text,
    p_context jsonb DEFAULT '{}'::jsonb, p_mailbox text DEFAULT NULL)
RETURNS TABLE (email_id bigint, created boolean, status text, message_key uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_mailbox bigint;
    v_existing outreach.emails%ROWTYPE;
    v_suppressed boolean;
BEGIN
    IF p_delivery_key IS NULL OR length(p_delivery_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'delivery key must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_recipient IS NULL OR p_recipient !~ '^[^@\s]+@[^@\s]+\.[^@\s]+$' THEN
        RAISE EXCEPTION 'recipient is not an email address' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Suppressions keep internationalised domains in Unicode (as leads are stored); an ACE
    -- (xn--) form could not match them, so it is refused rather than let through.
    IF split_part(p_recipient, '@', 2) ~* '(^|\.)xn--' THEN
        RAISE EXCEPTION 'recipient: write the domain in Unicode (IDNA-decoded), as outreach stores '
                        'suppressions: % ', split_part(p_recipient, '@', 2)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_template IS NULL OR p_template !~ '^[a-z0-9][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'template is not a template name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Replays first: the same key always returns its one row, whatever happened since.
    SELECT * INTO v_existing FROM outreach.emails e WHERE e.delivery_key = p_delivery_key;
    IF NOT FOUND THEN
        IF p_mailbox IS NULL THEN
            SELECT m.id INTO v_mailbox FROM outreach.mailboxes m WHERE m.transactional;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'no transactional mailbox: set "transactional: true" on one '
                                'mailbox of the mailbox file and run "outreach mailbox sync"'
                    USING ERRCODE = 'no_data_found';
            END IF;
        ELSE
            SELECT m.id INTO v_mailbox FROM outreach.mailboxes m WHERE m.address = lower(p_mailbox);
            IF NOT FOUND THEN
                RAISE EXCEPTION 'unknown mailbox %', p_mailbox USING ERRCODE = 'no_data_found';
            END IF;
        END IF;
        -- Queueing calls the one suppression function; a suppressed address gets a row too
        -- (status 'suppressed'), so a replay of the key gives the same answer.
        v_suppressed := outreach.is_suppressed(p_recipient, 'transactional');
        INSERT INTO outreach.emails AS e (message_class, delivery_key, recipient, template, context,
                                          mailbox_id, idempotency_key, status, scheduled_for)
        VALUES ('transactional', p_delivery_key, lower(p_recipient), p_template,
                coalesce(p_context, '{}'::jsonb), v_mailbox,
                md5('outreach-transactional:' || p_delivery_key)::uuid,
                CASE WHEN v_suppressed THEN 'suppressed' ELSE 'queued' END::outreach.email_status,
                now())
        -- No conflict target: the delivery key and the idempotency key made from it are both
        -- UNIQUE, and a concurrent insert of the same key may hit either index first.
        ON CONFLICT DO NOTHING
        RETURNING e.id, true, e.status::text, e.idempotency_key
        INTO email_id, created, status, message_key;
        IF FOUND THEN
            PERFORM pg_notify('outreach_transactional', email_id::text);
            RETURN NEXT;
            RETURN;
        END IF;
        -- A concurrent transaction inserted the same key and committed first.
        SELECT * INTO v_existing FROM outreach.emails e WHERE e.delivery_key = p_delivery_key;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'delivery key %: its idempotency key is taken by another email', p_delivery_key
                USING ERRCODE = 'unique_violation';
        END IF;
    END IF;
    IF lower(v_existing.recipient) IS DISTINCT FROM lower(p_recipient)
       OR v_existing.template IS DISTINCT FROM p_template THEN
        RAISE EXCEPTION 'delivery key % was already used for another message (email %)',
                        p_delivery_key, v_existing.id
            USING ERRCODE = 'unique_violation',
                  HINT = 'a delivery key names one message: make a new key for a new message';
    END IF;
    email_id := v_existing.id; created := false; status := v_existing.status::text;
    message_key := v_existing.idempotency_key;
    RETURN NEXT;
END
$$;
