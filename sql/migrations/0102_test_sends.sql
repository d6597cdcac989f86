-- 0102: test sends (issue 24, item 3): a campaign step rendered for a lead and sent to a seed
-- address through the real mailbox. Not in outreach.send_log: that holds exactly one entry per
-- email row (outreach_send_log_email_key), and a test send has no email row (making one would
-- queue a message to the lead). Every test send has its own Message-ID (a fresh UUID, never a
-- row's idempotency key), unique among test sends. It is a real send, so it counts toward the
-- mailbox's daily cap: trigger outreach_test_sends_count_claims adds it to
-- outreach.mailbox_claim_counts in the quarter-hour it was accepted, in the same transaction.
CREATE TABLE outreach.test_sends (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    step_id     bigint NOT NULL REFERENCES outreach.sequence_steps (id),
    lead_id     bigint NOT NULL REFERENCES outreach.leads (id),  -- whose data it was rendered with
    mailbox_id  bigint NOT NULL REFERENCES outreach.mailboxes (id),
    recipient   text NOT NULL,                -- the seed address it went to
    message_id  text NOT NULL,
    smtp_reply  text NOT NULL,                -- the server's reply to the end of DATA
    actor       text NOT NULL,                -- who sent it (the OS user)
    accepted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_test_sends_message_id_key UNIQUE (message_id),
    CONSTRAINT outreach_test_sends_actor_check CHECK (btrim(actor) <> '')
);

-- A test send counts toward its mailbox's daily cap like a claimed row (one unit in the
-- quarter-hour of accepted_at).
CREATE FUNCTION outreach.test_sends_count_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outreach.mailbox_claim_counts AS k (mailbox_id, quarter, claimed)
    VALUES (NEW.mailbox_id, outreach.claim_quarter(NEW.accepted_at), 1)
    ON CONFLICT (mailbox_id, quarter) DO UPDATE SET claimed = k.claimed + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER outreach_test_sends_count_claims
    AFTER INSERT ON outreach.test_sends
    FOR EACH ROW EXECUTE FUNCTION outreach.test_sends_count_claims();
