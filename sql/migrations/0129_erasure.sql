-- 0129: erasure on request (issue 27, item 3; GDPR Art. 17). outreach.erase_person_v1 removes
-- one person's personal data from every table that can hold it, in one transaction, and keeps
-- the person refused forever by a keyed hash in outreach.suppressions (kind 'address_hmac':
-- HMAC-SHA256 of the normal-form address), which the one suppression rule,
-- outreach.is_suppressed, now matches too.
--
-- The key is a secret and never lives in the database: every session that decides suppression
-- carries it in the setting outreach.erasure_key (outreach.db.connect sets it from
-- OUTREACH_ERASURE_KEY). The database keeps only a fingerprint of it (outreach.erasure_keys,
-- HMAC of a fixed text), written by the first erasure: from then on a session without the key, or
-- with another key, cannot decide suppression at all (outreach.erasure_key raises) instead of
-- silently matching nothing. Before any erasure a session without the key works as before.
--
-- What it does, table by table (the lead row is kept as a tombstone, so every foreign key and
-- UNIQUE (lead_id, step_id) still holds: emails, enrolments, test sends and events keep their
-- lead_id; see docs/howto/erasure.md):
--   leads ............... email 'erased:<id>', names, company, title, time zone, custom blanked
--   enrollments ......... active ones stopped (outreach.stop_enrollment);
--                         free-text stop reasons cleaned of the person
--   emails .............. the person's rows (marketing by lead, transactional by recipient) stay,
--                         status, times and Message-ID kept (queued ones become
--                         'suppressed'); diagnostics blanked; a
--                         transactional row's recipient 'erased:<id>' and context '{}'
--   send_log ............ subject (as rendered) removed; the SMTP reply cleaned of the person
--   email_resolutions, email_requeues  the operator's text cleaned, evidence and errors removed
--   suppressions ........ the address row becomes the keyed hash (reason 'erased'); its history
--   suppression_events .. names the hash instead of the address
--   inbound_messages .... the person's messages blanked as retention does (0125)
--   delivery_failures, esp_events  recipient 'erased:<id>', diagnostic removed
--   events .............. payload values naming the person removed
--   alerts, campaign_events, mailbox_events  text cleaned of the person
--   import_runs ......... problem lines naming the person removed (counted in problems_omitted)
--   source_rows ......... the lead's rows deleted (a row key may be the address)
--   test_sends .......... a seed recipient that is the person: 'erased:<id>'
-- It records itself in outreach.erasures: who, when, why, counts per table, never the address.

ALTER TABLE outreach.suppressions DROP CONSTRAINT outreach_suppressions_kind_check,
    ADD CONSTRAINT outreach_suppressions_kind_check
        CHECK (kind IN ('address', 'domain', 'address_hmac'));
ALTER TABLE outreach.suppressions DROP CONSTRAINT outreach_suppressions_reason_check,
    ADD CONSTRAINT outreach_suppressions_reason_check CHECK (reason IN
        ('unsubscribed', 'bounced', 'complained', 'manual', 'do-not-contact', 'erased'));
ALTER TABLE outreach.suppression_events DROP CONSTRAINT outreach_suppression_events_kind_check,
    ADD CONSTRAINT outreach_suppression_events_kind_check
        CHECK (kind IN ('address', 'domain', 'address_hmac'));

-- The fingerprint of the erasure key (one row at most): HMAC-SHA256 of a fixed text under the
-- key, hex. Written by the first erasure; it tells a missing or wrong key from the right one.
CREATE TABLE outreach.erasure_keys (
    id          integer PRIMARY KEY DEFAULT 1,
    fingerprint text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_erasure_keys_one_check CHECK (id = 1)
);

-- One row per erasure run (outreach lead erase, the outreach_lead_erase DAG): who, when, why and
-- how many rows of each table it changed. Never the address or a name: lead_id is the tombstone.
CREATE TABLE outreach.erasures (
    id        bigserial PRIMARY KEY,
    erased_at timestamptz NOT NULL DEFAULT now(),
    actor     text NOT NULL,
    reason    text NOT NULL,
    lead_id   bigint REFERENCES outreach.leads (id),  -- NULL: no lead had the address
    counts    jsonb NOT NULL,                           -- {"leads": 1, "emails": 2, ...}
    CONSTRAINT outreach_erasures_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_erasures_reason_check CHECK (btrim(reason) <> ''),
    CONSTRAINT outreach_erasures_counts_check CHECK (jsonb_typeof(counts) = 'object')
);

-- HMAC-SHA256 (RFC 2104) of message under key, from the built-in sha256() (the pgserver build has
-- no pgcrypto). Checked against Python's hmac module by tests/integration/test_erasure.py.
-- Not STRICT, so that it inlines; NULL gives NULL.
CREATE FUNCTION outreach.hmac_pad(key bytea, pad text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(varbit_send((('x' || rpad(encode(
                CASE WHEN length(key) > 64 THEN sha256(key) ELSE key END, 'hex'), 128, '0'))::bit(512)
            # ('x' || repeat(pad, 64))::bit(512))::varbit) FROM 5)
$$;

CREATE FUNCTION outreach.hmac_sha256(key bytea, message bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(outreach.hmac_pad(key, '5c') || sha256(outreach.hmac_pad(key, '36') || message))
$$;

-- The session's erasure key (the setting outreach.erasure_key, as UTF-8 bytes), failing closed:
-- once an erasure has happened (outreach.erasure_keys has its fingerprint) a missing key or a
-- key with another fingerprint raises, so no caller can miss an erased person. Before the first
-- erasure it returns NULL (nothing hashed to match), unless p_required (the erasure itself),
-- which raises without a key.
CREATE FUNCTION outreach.erasure_key(p_required boolean DEFAULT false) RETURNS bytea
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_setting text := current_setting('outreach.erasure_key', true);
    v_fingerprint text;
BEGIN
    SELECT k.fingerprint INTO v_fingerprint FROM outreach.erasure_keys k;
    IF coalesce(v_setting, '') = '' THEN
        IF p_required OR v_fingerprint IS NOT NULL THEN
            RAISE EXCEPTION 'the erasure key is not set: set OUTREACH_ERASURE_KEY (erased '
                            'addresses are matched by a keyed hash; see docs/howto/erasure.md)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NULL;
    END IF;
    IF v_fingerprint IS NULL THEN
        RETURN CASE WHEN p_required THEN convert_to(v_setting, 'UTF8') END;
    END IF;
    IF v_fingerprint IS DISTINCT FROM encode(outreach.hmac_sha256(convert_to(v_setting, 'UTF8'),
                                                                   'outreach erasure key check'), 'hex') THEN
        RAISE EXCEPTION 'OUTREACH_ERASURE_KEY is not the key erased addresses were hashed with '
                        '(see docs/howto/erasure.md)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN convert_to(v_setting, 'UTF8');
END
$$;

-- The keyed hash an erased address is kept as: HMAC-SHA256 of its normal form, hex.
CREATE FUNCTION outreach.erased_address_hash(address text, p_required boolean DEFAULT false)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT encode(outreach.hmac_sha256(outreach.erasure_key(p_required),
                                       convert_to(outreach.normalize_address(address), 'UTF8')), 'hex')
$$;

-- The suppression rule (0001, 0008), now also matching an erased address by its keyed hash.
-- 'erased' is honoured by every message class.
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
    -- Erased addresses: asked only once someone was erased (the key's fingerprint exists), the
    -- hash computed once per call (a sub-select), not once per suppression row it is compared
    -- with (9 µs a call before the first erasure, as before 0129).
    OR (EXISTS (SELECT 1 FROM outreach.erasure_keys)
        AND EXISTS (SELECT 1 FROM outreach.suppressions s
                    WHERE s.kind = 'address_hmac'
                      AND s.value = (SELECT outreach.erased_address_hash(address))
                      AND (message_class = 'marketing'
                           OR s.reason NOT IN ('unsubscribed', 'complained'))))
$$;

-- Does t mention any of needles (case-insensitive)?
CREATE FUNCTION outreach.erasure_mentions(t text, needles text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(needles) n
                                     WHERE n <> '' AND strpos(lower(t), lower(n)) > 0)
$$;

-- t with every occurrence of each of needles (case-insensitive) replaced by '[erased]'.
CREATE FUNCTION outreach.erasure_clean(t text, needles text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN NOT outreach.erasure_mentions(t, needles) THEN t
        ELSE regexp_replace(t, '(' || (SELECT string_agg(regexp_replace(n, '([^[:alnum:]_[:space:]])',
                                                                        '\\\1', 'g'), '|')
                                       FROM unnest(needles) n WHERE n <> '') || ')',
                            '[erased]', 'gi')
    END
$$;

-- The emails' transactional request never changes (0006), except by an erasure: the recipient
-- becomes 'erased:<id>' and the context '{}', the key, template and class stay.
CREATE OR REPLACE FUNCTION outreach.emails_keep_transactional_request() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('outreach.erasing', true) = 'on'
       AND (NEW.delivery_key, NEW.template, NEW.message_class)
           IS NOT DISTINCT FROM (OLD.delivery_key, OLD.template, OLD.message_class)
       AND NEW.recipient = 'erased:' || OLD.id AND NEW.context = '{}'::jsonb THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the delivery key, recipient, template and context of email % never change', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;

-- Erase one person (see the header): p_forms are the spellings of the address to find, the
-- normal form first (outreach.addresses.normalize_address; the hash is of it), then e.g. its
-- IDNA (xn--) spelling as inbound mail names it. p_actor: who (recorded); p_reason: why
-- (recorded, must not name the person). Returns the outreach.erasures row's id and counts.
-- Raises invalid_parameter_value without the key (outreach.erasure_key) or for a reason naming
-- the person or a mailbox's own address, object_in_use while an email to the person is being
-- sent (run it again when the send run is over). Running it again changes nothing more (counts 0).
CREATE FUNCTION outreach.erase_person_v1(p_forms text[], p_actor text, p_reason text,
                                         OUT erasure_id bigint, OUT counts jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    v_address text := p_forms[1];
    v_hash text;
    v_key bytea;
    v_lead outreach.leads%ROWTYPE;
    v_needles text[];
    v_emails bigint[];
    v_n integer;
    v_en record;
BEGIN
    IF v_address IS NULL OR btrim(v_address) = '' THEN
        RAISE EXCEPTION 'an erasure needs the address' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF btrim(coalesce(p_actor, '')) = '' OR btrim(coalesce(p_reason, '')) = '' THEN
        RAISE EXCEPTION 'an erasure needs who (by) and why (reason)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM outreach.mailboxes m WHERE lower(m.address) = ANY (p_forms)) THEN
        RAISE EXCEPTION 'that is one of your mailboxes, not a person to erase'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_key := outreach.erasure_key(true);
    INSERT INTO outreach.erasure_keys (id, fingerprint)
    VALUES (1, encode(outreach.hmac_sha256(v_key, 'outreach erasure key check'), 'hex'))
    ON CONFLICT (id) DO NOTHING;
    v_hash := outreach.erased_address_hash(v_address, true);  -- checks the fingerprint too
    PERFORM set_config('outreach.erasing', 'on', true);
    counts := '{}'::jsonb;

    SELECT * INTO v_lead FROM outreach.leads l WHERE l.email = ANY (p_forms) FOR UPDATE;
    v_needles := p_forms || ARRAY(SELECT x FROM unnest(ARRAY[
        btrim(v_lead.first_name || ' ' || v_lead.last_name), v_lead.first_name, v_lead.last_name]) x
        WHERE length(btrim(coalesce(x, ''))) >= 2);
    IF outreach.erasure_mentions(p_reason, v_needles) THEN
        RAISE EXCEPTION 'the reason must not name the person (it is kept)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The person's email rows, locked: a sender holding one ('sending') may still write its
    -- rendered subject into the send log, so the erasure waits for it (run again later).
    v_emails := ARRAY(SELECT e.id FROM outreach.emails e
                      WHERE (v_lead.id IS NOT NULL AND e.lead_id = v_lead.id)
                         OR (e.message_class = 'transactional' AND lower(e.recipient) = ANY (p_forms))
                      ORDER BY e.id FOR UPDATE);
    IF EXISTS (SELECT 1 FROM outreach.emails e WHERE e.id = ANY (v_emails) AND e.status = 'sending') THEN
        RAISE EXCEPTION 'an email to this person is being sent right now: run the erasure again '
                        'once the send run is over' USING ERRCODE = 'object_in_use';
    END IF;

    -- Suppressions: the address row becomes the keyed hash (its history follows), or a new hash
    -- row is written (its trigger records the suppress event).
    IF NOT EXISTS (SELECT 1 FROM outreach.suppressions s WHERE s.kind = 'address_hmac' AND s.value = v_hash) THEN
        UPDATE outreach.suppressions s SET kind = 'address_hmac', value = v_hash, reason = 'erased',
                                           source = 'erasure'
        WHERE s.id = (SELECT min(id) FROM outreach.suppressions
                      WHERE kind = 'address' AND value = ANY (p_forms));
        IF FOUND THEN
            INSERT INTO outreach.suppression_events (action, suppression_id, kind, value, reason,
                                                     source, actor, note)
            SELECT 'suppress', s.id, s.kind, s.value, s.reason, s.source, btrim(p_actor), 'erased'
            FROM outreach.suppressions s WHERE s.kind = 'address_hmac' AND s.value = v_hash;
        ELSE
            PERFORM set_config('outreach.actor', btrim(p_actor), true);
            PERFORM set_config('outreach.note', 'erased', true);
            INSERT INTO outreach.suppressions (kind, value, reason, source)
            VALUES ('address_hmac', v_hash, 'erased', 'erasure');
        END IF;
        counts := counts || jsonb_build_object('suppressions', 1);
    END IF;
    -- An address row written again since an earlier erasure (a suppression list re-imported).
    PERFORM set_config('outreach.actor', btrim(p_actor), true);
    PERFORM set_config('outreach.note', 'erased: kept as its keyed hash', true);
    DELETE FROM outreach.suppressions s WHERE s.kind = 'address' AND s.value = ANY (p_forms);
    UPDATE outreach.suppression_events se
    SET kind = 'address_hmac', value = v_hash, note = outreach.erasure_clean(se.note, v_needles),
        source = CASE WHEN outreach.erasure_mentions(se.source, v_needles) THEN 'erasure' ELSE se.source END
    WHERE se.kind = 'address' AND se.value = ANY (p_forms);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('suppression_events', v_n);

    -- Emails: rows stay (one per lead and step; the send log's Message-ID, status, times).
    -- Queued rows are suppressed now: a transactional one has no recipient any more.
    UPDATE outreach.emails e
    SET status = CASE WHEN e.status = 'queued' THEN 'suppressed' ELSE e.status END,
        last_error = NULL, failure_diagnostic = NULL,
        late_accept_reply = CASE WHEN e.late_accepted_at IS NULL THEN NULL ELSE '[erased]' END,
        recipient = CASE WHEN e.message_class = 'transactional' THEN 'erased:' || e.id END,
        context = CASE WHEN e.message_class = 'transactional' THEN '{}'::jsonb END,
        updated_at = now()
    WHERE e.id = ANY (v_emails)
      AND (e.status = 'queued' OR e.last_error IS NOT NULL OR e.failure_diagnostic IS NOT NULL
           OR e.late_accept_reply IS DISTINCT FROM CASE WHEN e.late_accepted_at IS NULL THEN NULL ELSE '[erased]' END
           OR (e.message_class = 'transactional' AND e.recipient <> 'erased:' || e.id));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('emails', v_n);
    UPDATE outreach.send_log sl
    SET subject = NULL, smtp_reply = outreach.erasure_clean(sl.smtp_reply, v_needles)
    WHERE sl.email_id = ANY (v_emails)
      AND (sl.subject IS NOT NULL OR outreach.erasure_mentions(sl.smtp_reply, v_needles));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('send_log', v_n);
    UPDATE outreach.email_resolutions r
    SET note = outreach.erasure_clean(r.note, v_needles), evidence = NULL
    WHERE r.email_id = ANY (v_emails)
      AND (r.evidence IS NOT NULL OR outreach.erasure_mentions(r.note, v_needles));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('email_resolutions', v_n);
    UPDATE outreach.email_requeues q
    SET last_error = NULL, reason = outreach.erasure_clean(q.reason, v_needles)
    WHERE q.email_id = ANY (v_emails)
      AND (q.last_error IS NOT NULL OR outreach.erasure_mentions(q.reason, v_needles));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('email_requeues', v_n);

    -- Enrolments: active ones stop (their queued steps are cancelled); older reasons cleaned.
    v_n := 0;
    FOR v_en IN SELECT en.id FROM outreach.enrollments en
                WHERE en.lead_id = v_lead.id AND en.status = 'active' ORDER BY en.id LOOP
        PERFORM outreach.stop_enrollment(v_en.id, 'stopped', 'erased (GDPR Art. 17)', btrim(p_actor));
        v_n := v_n + 1;
    END LOOP;
    UPDATE outreach.enrollments en SET stop_reason = outreach.erasure_clean(en.stop_reason, v_needles)
    WHERE en.lead_id = v_lead.id AND outreach.erasure_mentions(en.stop_reason, v_needles);
    counts := counts || jsonb_build_object('enrollments', v_n);

    -- Inbound mail about the person: blanked as retention does (0125), the UNIQUE keys kept.
    UPDATE outreach.inbound_messages im
    SET from_address = '', subject = '', address = NULL, diagnostic = NULL, evidence = '',
        content_purged_at = coalesce(im.content_purged_at, now())
    WHERE ((v_lead.id IS NOT NULL AND im.lead_id = v_lead.id) OR im.email_id = ANY (v_emails)
           OR outreach.erasure_mentions(im.from_address, p_forms)
           OR outreach.erasure_mentions(im.address, p_forms)
           OR outreach.erasure_mentions(im.subject, v_needles)
           OR outreach.erasure_mentions(im.evidence, v_needles)
           OR outreach.erasure_mentions(im.diagnostic, v_needles))
      AND (im.from_address <> '' OR im.subject <> '' OR im.address IS NOT NULL
           OR im.diagnostic IS NOT NULL OR im.evidence <> '');
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('inbound_messages', v_n);
    UPDATE outreach.delivery_failures df SET address = 'erased:' || df.id, diagnostic = NULL
    WHERE (df.email_id = ANY (v_emails) OR lower(df.address) = ANY (p_forms)
           OR outreach.erasure_mentions(df.diagnostic, v_needles))
      AND df.address <> 'erased:' || df.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('delivery_failures', v_n);
    UPDATE outreach.esp_events ev SET recipient = 'erased:' || ev.id, diagnostic = NULL
    WHERE (ev.email_id = ANY (v_emails) OR lower(ev.recipient) = ANY (p_forms)
           OR outreach.erasure_mentions(ev.diagnostic, v_needles))
      AND ev.recipient <> 'erased:' || ev.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('esp_events', v_n);
    UPDATE outreach.test_sends t SET recipient = 'erased:' || t.id WHERE lower(t.recipient) = ANY (p_forms);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('test_sends', v_n);

    -- The event log names rows by id (0115); any value that names the person goes.
    UPDATE outreach.events ev
    SET payload = (SELECT coalesce(jsonb_object_agg(j.key, j.value), '{}'::jsonb)
                   FROM jsonb_each(ev.payload) j
                   WHERE NOT outreach.erasure_mentions(j.value::text, v_needles))
    WHERE outreach.erasure_mentions(ev.payload::text, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('events', v_n);
    UPDATE outreach.alerts a
    SET subject = outreach.erasure_clean(a.subject, v_needles), body = outreach.erasure_clean(a.body, v_needles)
    WHERE outreach.erasure_mentions(a.subject, v_needles) OR outreach.erasure_mentions(a.body, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('alerts', v_n);
    UPDATE outreach.campaign_events ce SET reason = outreach.erasure_clean(ce.reason, v_needles)
    WHERE outreach.erasure_mentions(ce.reason, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('campaign_events', v_n);
    UPDATE outreach.mailbox_events me SET reason = outreach.erasure_clean(me.reason, v_needles)
    WHERE outreach.erasure_mentions(me.reason, v_needles);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('mailbox_events', v_n);

    -- Import problem lines that quote the person (the run's counts stay).
    UPDATE outreach.import_runs r
    SET problems = k.kept, problems_omitted = r.problems_omitted + jsonb_array_length(r.problems)
                                              - jsonb_array_length(k.kept)
    FROM (SELECT r2.id, (SELECT coalesce(jsonb_agg(p ORDER BY o), '[]'::jsonb)
                         FROM jsonb_array_elements(r2.problems) WITH ORDINALITY AS x(p, o)
                         WHERE NOT outreach.erasure_mentions(p::text, v_needles)) AS kept
          FROM outreach.import_runs r2
          WHERE outreach.erasure_mentions(r2.problems::text, v_needles)) k
    WHERE r.id = k.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('import_runs', v_n);
    DELETE FROM outreach.source_rows sr WHERE sr.lead_id = v_lead.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('source_rows', v_n);

    -- The lead: a tombstone (its id keeps the email rows, enrolments and events valid).
    UPDATE outreach.leads l
    SET email = 'erased:' || l.id, first_name = '', last_name = '', company = '', title = '',
        timezone = NULL, custom = '{}'::jsonb, updated_at = now()
    WHERE l.id = v_lead.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    counts := counts || jsonb_build_object('leads', v_n);
    IF NOT counts ? 'suppressions' THEN
        counts := counts || jsonb_build_object('suppressions', 0);
    END IF;

    PERFORM set_config('outreach.erasing', '', true);
    INSERT INTO outreach.erasures (actor, reason, lead_id, counts)
    VALUES (btrim(p_actor), btrim(p_reason), v_lead.id, counts)
    RETURNING id INTO erasure_id;
END
$$;
