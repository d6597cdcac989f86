-- Erasure (outreach.erasure; migration 0129): one person's personal data removed everywhere in
-- one transaction, the person kept refused by a keyed hash. The work is one stored function, so
-- every table it touches is listed in one place (the migration's header).

-- name: erasure_erase_person
-- Erase the person spelled %(forms)s (normal form first); record who (%(actor)s) and why
-- (%(reason)s) in outreach.erasures. Returns that row's id and the counts per table.
SELECT erasure_id, counts FROM outreach.erase_person_v1(%(forms)s::text[], %(actor)s, %(reason)s);
