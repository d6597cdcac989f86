-- 0143: an erasure matches the person's names and address forms as whole words (found by
-- review): 0129 matched case-insensitive substrings, so erasing "Li Wei" rewrote another lead's
-- "delivery delayed" and a reason "reliability check". A whole word is the needle with no
-- letter, digit or underscore right before or after it (PostgreSQL's \m and \M).

-- Does t mention any of needles (case-insensitive, as whole words)?
CREATE OR REPLACE FUNCTION outreach.erasure_mentions(t text, needles text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t IS NOT NULL AND EXISTS (
        SELECT 1 FROM unnest(needles) n
        WHERE n <> '' AND strpos(lower(t), lower(n)) > 0
          AND t ~* ('\m' || regexp_replace(n, '([^[:alnum:]_[:space:]])', '\\\1', 'g') || '\M'))
$$;

-- t with every whole-word occurrence of each of needles (case-insensitive) replaced by '[erased]'.
CREATE OR REPLACE FUNCTION outreach.erasure_clean(t text, needles text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN NOT outreach.erasure_mentions(t, needles) THEN t
        ELSE regexp_replace(t, '\m(' || (SELECT string_agg(regexp_replace(n, '([^[:alnum:]_[:space:]])',
                                                                           '\\\1', 'g'), '|')
                                          FROM unnest(needles) n WHERE n <> '') || ')\M',
                            '[erased]', 'gi')
    END
$$;
