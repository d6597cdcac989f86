-- Erasure (outreach.erasure; migration 0129): one person's personal data removed everywhere in
-- one transaction, the person kept refused by a keyed hash. The work is one stored function, so
-- every table it touches is listed in one place (the migration's header).

-- name: erasure_erase_person
-- Erase the person spelled %(forms)s (normal form first); record who (%(actor)s) and why
-- (%(reason)s) in outreach.erasures. Returns that row's id and the counts per table.
SELECT erasure_id, counts FROM outreach.erase_person_v1(%(forms)s::text[], %(actor)s, %(reason)s);

-- name: erasure_wait_for_imports
-- Before the erasure, in its transaction: wait for every lead import in flight (each holds this
-- lock shared from its start, lead_import_hold_off_erasure) and hold new ones off until the
-- erasure commits. An import asks the suppression rule before it upserts; without this, one that
-- asked before the erasure committed would store the erased address again as a new lead.
SELECT pg_advisory_xact_lock(hashtextextended('outreach.erasure-vs-import', 0)) IS NULL AS waited;
