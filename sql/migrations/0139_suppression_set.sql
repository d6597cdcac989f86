-- 0139: the suppression rule, set-based (issue 27, erasure follow-up). Since 0129 a call of
-- outreach.is_suppressed after the first erasure cost ≈160 µs instead of ≈10 µs (pgserver's
-- PostgreSQL 16, 100,000 calls: 16.1 s). Measured (pg_stat_user_functions, track_functions):
-- ≈130 µs of it was outreach.hmac_sha256 *not inlined* — its key argument was an expensive
-- expression (the plpgsql outreach.erasure_key()) used twice in the body, so the planner called it
-- as a SQL function, and a SQL function nested in a non-inlined one (is_suppressed) is parsed and
-- planned again on every call; ≈20 µs was the key check (outreach.erasure_key(): the SQL HMAC of
-- the fingerprint), once per call; the lookups and the address's own HMAC ≈10 µs.
--
-- Now the rule is one set-returning SQL function, outreach.suppressed_addresses(addresses,
-- message_class): which of the given addresses are suppressed. It checks the key once per
-- statement (a materialised CTE, whose column makes hmac_sha256 inline), normalises and hashes
-- each address once, and looks each up by the UNIQUE (kind, value) index. is_suppressed is
-- that function asked about one address (the SRF inlines into it), so there is still exactly one
-- place that decides (promise §4); the bulk paths — the import's lead_stage_mark_suppressed and
-- email_queue_due — pass all their addresses in one array instead of calling per row.
-- The per-call key check is made cheap for sessions opened by outreach.db.connect (below).
-- Bench (docs/howto/erasure.md, "Cost"): 100,000 addresses after an erasure, same database.

-- pgcrypto's C hmac() where the server has it (a real PostgreSQL ships it with its contrib
-- files; the pgserver wheel does not): the same RFC 2104 HMAC-SHA256, about three times faster
-- than the SQL one (PostgreSQL 15, 100,000 hashes: 0.4 s against 1.2 s). CREATE EXTENSION fails
-- without the contrib files or the privilege; then the SQL HMAC (0129) stays, nothing else
-- changes. The function keeps its name and signature, so every caller (the fingerprint, the
-- erased address's hash) gets the same bytes either way.
DO $do$
DECLARE
    v_schema name;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pgcrypto;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pgcrypto is not available (%): keeping the SQL HMAC', SQLERRM;
    END;
    SELECT n.nspname INTO v_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pgcrypto';
    IF v_schema IS NOT NULL THEN
        EXECUTE format($f$
CREATE OR REPLACE FUNCTION outreach.hmac_sha256(key bytea, message bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $b$
    SELECT %I.hmac(message, key, 'sha256')
$b$$f$, v_schema);
    END IF;
END
$do$;

-- The session's erasure key (0129), failing closed as before; what is new is a cheap path for
-- a session that proves it checked its key already: outreach.db.connect passes, beside the key,
-- the setting outreach.erasure_key_check = hex sha256(key || fingerprint), the fingerprint being
-- what the key gives (HMAC-SHA256 of 'outreach erasure key check', computed by Python). It
-- equals sha256(the session's key || the stored fingerprint) only when the key's fingerprint is
-- the stored one, so the comparison is the fingerprint check with the HMAC already done (one
-- built-in sha256, ≈1 µs, instead of the SQL HMAC, ≈18 µs). Any other value (none, stale, a key
-- SET later in the session) takes the full check, which raises for a missing or other key.
CREATE OR REPLACE FUNCTION outreach.erasure_key(p_required boolean DEFAULT false) RETURNS bytea
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
    IF current_setting('outreach.erasure_key_check', true)
       = encode(sha256(convert_to(v_setting || v_fingerprint, 'UTF8')), 'hex') THEN
        RETURN convert_to(v_setting, 'UTF8');
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

-- Which of addresses (any spelling; NULLs ignored) are suppressed for message_class: returned as
-- given (each distinct one once), so a caller joins them back to its rows. Marketing mail honours
-- every suppression; transactional mail ignores unsubscribed and complained. Addresses and
-- domains compare in normal form (outreach.normalize_address), an erased address by its keyed
-- hash (0129), for which the session's erasure key is checked once per call of this function:
-- once someone was erased a missing or other key raises invalid_parameter_value
-- (outreach.erasure_key) whenever an address is not suppressed by address or domain.
CREATE FUNCTION outreach.suppressed_addresses(addresses text[], message_class text DEFAULT 'marketing')
RETURNS TABLE (address text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    WITH k AS MATERIALIZED (
        -- The key (NULL before the first erasure), checked once; materialised, so its column is
        -- a plain value to hmac_sha256 (which then inlines) and erasure_key() runs once.
        SELECT outreach.erasure_key() AS key
    ),
    a AS (
        SELECT DISTINCT x AS address, outreach.normalize_address(x) AS norm
        FROM unnest(addresses) x
        WHERE x IS NOT NULL
    )
    SELECT a.address
    FROM a
    WHERE EXISTS (
        SELECT 1 FROM outreach.suppressions s
        WHERE ((s.kind = 'address' AND s.value = a.norm)
               OR (s.kind = 'domain' AND s.value = split_part(a.norm, '@', 2)))
          AND (message_class = 'marketing' OR s.reason NOT IN ('unsubscribed', 'complained'))
    )
    OR EXISTS (
        SELECT 1 FROM k JOIN outreach.suppressions s
          ON s.kind = 'address_hmac'
         AND s.value = encode(outreach.hmac_sha256(k.key, convert_to(a.norm, 'UTF8')), 'hex')
        WHERE k.key IS NOT NULL
          AND (message_class = 'marketing' OR s.reason NOT IN ('unsubscribed', 'complained'))
    )
$$;

-- The suppression rule (0001, 0008, 0129): outreach.suppressed_addresses asked about one address.
CREATE OR REPLACE FUNCTION outreach.is_suppressed(address text, message_class text DEFAULT 'marketing')
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT EXISTS (SELECT 1 FROM outreach.suppressed_addresses(ARRAY[address], message_class))
$$;
