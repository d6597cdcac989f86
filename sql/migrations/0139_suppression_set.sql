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
-- Bench (docs/howto/erasure.md, "Cost"): 100,000 addresses after an erasure, same database.

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
