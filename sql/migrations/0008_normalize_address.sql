-- 0008: one address normaliser (issue 12, item 8). The example signup app trimmed nothing while
-- outreach did: " a@x " and "a@x\t" were three users and three welcome emails. What an address is
-- is decided by outreach.addresses.normalize_address (Python, with email-validator); this is the
-- same rule for text that is already a valid address, for the SQL functions and for callers that
-- only have SQL. Forms stored so far are already normal: nothing stored changes.

-- Trim what Python's str.strip() trims (every character str.isspace() calls white space), Unicode
-- NFC, lower case. lower() follows the database's LC_CTYPE: a UTF-8 locale (C.UTF-8, en_US.UTF-8;
-- the embedded server uses C.UTF-8) lower-cases all of Unicode, as Python does; plain "C" only
-- ASCII. IMMUTABLE so that a unique index can use it (the example app's users table does).
CREATE FUNCTION outreach.normalize_address(address text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT lower(normalize(btrim(address,
        U&'\0009\000A\000B\000C\000D\001C\001D\001E\001F\0020\0085\00A0\1680\2000\2001\2002\2003\2004\2005\2006\2007\2008\2009\200A\2028\2029\202F\205F\3000'),
        NFC))
$$;
COMMENT ON FUNCTION outreach.normalize_address(text) IS
    'the normal form of an address (trim, NFC, lower case), as outreach.addresses.normalize_address stores it';

-- The one suppression function compares normal forms, whoever calls it (same signature and
-- rule as 0006; only the address is normalised instead of lower-cased).
CREATE OR REPLACE FUNCTION outreach.is_suppressed(address text, message_class text DEFAULT 'marketing')
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT EXISTS (
        SELECT 1 FROM outreach.suppressions s
        WHERE ((s.kind = 'address' AND s.value = outreach.normalize_address(address))
               OR (s.kind = 'domain'
                   AND s.value = split_part(outreach.normalize_address(address), '@', 2)))
          AND (message_class = 'marketing'
               OR s.reason NOT IN ('unsubscribed', 'complained'))
    )
$$;

-- Enqueue normalises the recipient once and uses that form for the check, the suppression
-- question, the stored row and the replay comparison (0006 lower-cased without trimming).
CREATE OR REPLACE FUNCTION outreach.enqueue_transactional(
    p_delivery_key text, p_recipient text, p_template text,
    p_context jsonb DEFAULT '{}'::jsonb, p_mailbox text DEFAULT NULL)
RETURNS TABLE (email_id bigint, created boolean, status text, message_key uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_mailbox bigint;
    v_existing outreach.emails%ROWTYPE;
    v_suppressed boolean;
    -- The one normal form (see outreach.normalize_address): " jo@example.com\t" and
    -- "Jo@Example.COM" are one recipient, stored, compared and suppressed alike.
    v_recipient text := outreach.normalize_address(p_recipient);
BEGIN
    IF p_delivery_key IS NULL OR length(p_delivery_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'delivery key must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_recipient IS NULL OR v_recipient !~ '^[^@\s]+@[^@\s]+\.[^@\s]+$' THEN
        RAISE EXCEPTION 'recipient is not an email address' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Suppressions keep internationalised domains in Unicode (as leads are stored); an ACE
    -- (xn--) form could not match them, so it is refused rather than let through.
    IF split_part(v_recipient, '@', 2) ~* '(^|\.)xn--' THEN
        RAISE EXCEPTION 'recipient: write the domain in Unicode (IDNA-decoded), as outreach stores '
                        'suppressions: % ', split_part(v_recipient, '@', 2)
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
        v_suppressed := outreach.is_suppressed(v_recipient, 'transactional');
        INSERT INTO outreach.emails AS e (message_class, delivery_key, recipient, template, context,
                                          mailbox_id, idempotency_key, status, scheduled_for)
        VALUES ('transactional', p_delivery_key, v_recipient, p_template,
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
    IF outreach.normalize_address(v_existing.recipient) IS DISTINCT FROM v_recipient
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
