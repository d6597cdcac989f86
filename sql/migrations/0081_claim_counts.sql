-- 0081: the daily cap reads a counter instead of counting today's rows (issue 16, the claim).
-- mailbox_remaining_today counted, per claim, every row the mailbox claimed today (sending, sent
-- or unconfirmed): a cost that grows with the day, paid under the mailbox lock, so it also
-- serialised the mailbox's claimers. The database now keeps that figure per mailbox and UTC
-- quarter-hour of claimed_at (every time zone's midnight falls on a quarter-hour today), and
-- the daily count sums at most 96 counter rows. Triggers on outreach.emails keep it, so every
-- transition that changes what the cap counts (a claim, a retry, a release, a final failure, a
-- suppression or cancellation of a claimed row, the reaper, an operator resolution, the handoff
-- stamp moving claimed_at, or a row inserted, updated or deleted by hand) changes it in the same
-- transaction; a timezone change of a mailbox needs nothing (the buckets are UTC).

-- The quarter-hour (UTC) of a moment: the counter's bucket.
CREATE FUNCTION outreach.claim_quarter(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT date_bin(interval '15 minutes', at, timestamptz '2000-01-01 00:00:00+00')
$$;

-- Per mailbox and quarter-hour of claimed_at: how many of its rows claimed then count against
-- its daily cap now (status sending or sent, or failed as unconfirmed). Kept only by the
-- triggers outreach_emails_count_claims_* (never written by a query).
CREATE TABLE outreach.mailbox_claim_counts (
    mailbox_id bigint NOT NULL REFERENCES outreach.mailboxes (id) ON DELETE CASCADE,
    quarter    timestamptz NOT NULL,     -- outreach.claim_quarter(claimed_at)
    claimed    integer NOT NULL,
    PRIMARY KEY (mailbox_id, quarter),
    CONSTRAINT outreach_mailbox_claim_counts_claimed_check CHECK (claimed >= 0)
);

-- No change of outreach.emails between the backfill's snapshot and the triggers below (a sender
-- still running during the upgrade): it would be in no counter row, for good. Writers wait for
-- this migration's commit; readers do not.
LOCK TABLE outreach.emails IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO outreach.mailbox_claim_counts (mailbox_id, quarter, claimed)
SELECT e.mailbox_id, outreach.claim_quarter(e.claimed_at), count(*)
FROM outreach.emails e
WHERE e.claimed_at IS NOT NULL AND (e.status IN ('sending', 'sent') OR e.failure_kind = 'unconfirmed')
GROUP BY 1, 2;

-- One row of outreach.emails left (OLD) or entered (NEW) what the daily cap counts, or moved to
-- another mailbox or quarter-hour while counted: move its unit in outreach.mailbox_claim_counts.
-- The triggers' WHEN clauses call it only then (a mark sent, a touch within the quarter-hour
-- never call it).
CREATE FUNCTION outreach.emails_count_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.claimed_at IS NOT NULL
       AND (OLD.status IN ('sending', 'sent') OR OLD.failure_kind IS NOT DISTINCT FROM 'unconfirmed') THEN
        UPDATE outreach.mailbox_claim_counts k SET claimed = k.claimed - 1
        WHERE k.mailbox_id = OLD.mailbox_id AND k.quarter = outreach.claim_quarter(OLD.claimed_at);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.claimed_at IS NOT NULL
       AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed') THEN
        UPDATE outreach.mailbox_claim_counts k SET claimed = k.claimed + 1
        WHERE k.mailbox_id = NEW.mailbox_id AND k.quarter = outreach.claim_quarter(NEW.claimed_at);
        IF NOT FOUND THEN  -- the quarter's first row (the upsert is the slower path)
            INSERT INTO outreach.mailbox_claim_counts AS k (mailbox_id, quarter, claimed)
            VALUES (NEW.mailbox_id, outreach.claim_quarter(NEW.claimed_at), 1)
            ON CONFLICT (mailbox_id, quarter) DO UPDATE SET claimed = k.claimed + 1;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION outreach.emails_truncate_claim_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outreach.mailbox_claim_counts;
    RETURN NULL;
END
$$;

CREATE TRIGGER outreach_emails_count_claims_insert
    AFTER INSERT ON outreach.emails
    FOR EACH ROW
    WHEN (NEW.claimed_at IS NOT NULL
          AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
    EXECUTE FUNCTION outreach.emails_count_claims();

CREATE TRIGGER outreach_emails_count_claims_update
    AFTER UPDATE ON outreach.emails
    FOR EACH ROW
    WHEN ((OLD.claimed_at IS NOT NULL
           AND (OLD.status IN ('sending', 'sent') OR OLD.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
              IS DISTINCT FROM
          (NEW.claimed_at IS NOT NULL
           AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
          OR ((NEW.claimed_at IS NOT NULL
               AND (NEW.status IN ('sending', 'sent') OR NEW.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
              AND (OLD.mailbox_id <> NEW.mailbox_id
                   OR outreach.claim_quarter(OLD.claimed_at)
                      IS DISTINCT FROM outreach.claim_quarter(NEW.claimed_at))))
    EXECUTE FUNCTION outreach.emails_count_claims();

CREATE TRIGGER outreach_emails_count_claims_delete
    AFTER DELETE ON outreach.emails
    FOR EACH ROW
    WHEN (OLD.claimed_at IS NOT NULL
          AND (OLD.status IN ('sending', 'sent') OR OLD.failure_kind IS NOT DISTINCT FROM 'unconfirmed'))
    EXECUTE FUNCTION outreach.emails_count_claims();

CREATE TRIGGER outreach_emails_count_claims_truncate
    AFTER TRUNCATE ON outreach.emails
    FOR EACH STATEMENT EXECUTE FUNCTION outreach.emails_truncate_claim_counts();
