-- 0084: cheaper per-row rules for queue-due (issue 16: 1M leads in ≤ 15 s). Same verdicts, same
-- signatures; only the bodies change, so every caller (email_queue_due, report_missing_fields,
-- outreach.is_suppressed, outreach.enqueue_transactional) keeps calling the one function.
--
-- outreach.lead_missing_fields was a SQL function over unnest() with an aggregate: never inlined,
-- one executor start per (lead, step) and the lead's whole row built for it (EXPLAIN ANALYZE,
-- 100,000 leads: 1.03 s of a scan that takes 0.05 s). As one expression over the four fields
-- outreach_sequence_steps_requires_check allows, the planner inlines it and reads the columns
-- (0.085 s). Sorted as before; a field listed twice is named once (the campaign loader stores
-- requires deduplicated and sorted).
CREATE OR REPLACE FUNCTION outreach.lead_missing_fields(l outreach.leads, fields text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_remove(ARRAY[
        CASE WHEN 'company' = ANY (fields) AND coalesce(btrim(l.company), '') = ''
             THEN 'company' END,
        CASE WHEN 'first_name' = ANY (fields) AND coalesce(btrim(l.first_name), '') = ''
             THEN 'first_name' END,
        CASE WHEN 'last_name' = ANY (fields) AND coalesce(btrim(l.last_name), '') = ''
             THEN 'last_name' END,
        CASE WHEN 'title' = ANY (fields) AND coalesce(btrim(l.title), '') = ''
             THEN 'title' END], NULL)
$$;

-- outreach.normalize_address: Unicode normalisation (normalize(…, NFC)) was most of its cost
-- (100,000 addresses: 0.44 s, 0.09 s without it), and outreach.is_suppressed calls it twice per
-- address. An all-ASCII address (octet_length = length in a UTF-8 database) is already NFC and
-- can hold only the ASCII characters of the trimmed set, so it skips both; the result is the
-- same for every input. Not STRICT: PostgreSQL inlines a STRICT SQL function only when its body
-- is strict too, and CASE is not, so a STRICT version ran as a function call each time — 5x slower
-- inside outreach.is_suppressed than the 0014 body (100,000 addresses: 5.8 s against 1.8 s without
-- STRICT, PG15). NULL still gives NULL (every branch is strict in the address).
CREATE OR REPLACE FUNCTION outreach.normalize_address(address text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(address) = length(address)
        THEN lower(btrim(address, U&'\0009\000A\000B\000C\000D\001C\001D\001E\001F\0020'))
        ELSE lower(normalize(btrim(address,
            U&'\0009\000A\000B\000C\000D\001C\001D\001E\001F\0020\0085\00A0\1680\2000\2001\2002\2003\2004\2005\2006\2007\2008\2009\200A\2028\2029\202F\205F\3000'),
            NFC))
    END
$$;
