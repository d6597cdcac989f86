-- 0009: the SMTP handoff is a fact in the database; a late acceptance is kept as evidence;
-- operators may requeue not-accepted failures, and who did it is kept.
--
-- Before this, the reaper could not tell a claimed row that reached the SMTP server from one that
-- never left the sender, and failed a killed sender's whole batch as unconfirmed (162 rows of
-- which 13 had reached the server, in one test).

-- The handoff stamp: the sender commits it (a guarded UPDATE, email_touch_claim) right before
-- MAIL FROM of that row, after its SMTP session is connected. A 'sending' row without it never
-- reached the server: the reaper puts it back in the queue without counting the attempt. A row
-- with it may have gone out: the reaper fails it as unconfirmed. A queued row has not been handed
-- over in its current attempt: every path back to the queue clears it (the CHECK makes a path
-- that forgets fail loudly instead of misleading the next reaper run).
ALTER TABLE outreach.emails
    ADD COLUMN handed_over_at timestamptz,
    -- Evidence of a late acceptance: the server answered 2xx to the end of DATA after the row
    -- had already been failed as unconfirmed under the same claim token (the reaper took it while
    -- the sender waited for the reply). Only ever added to an unconfirmed row, never changing its
    -- status: a person still decides (outreach resolve), and sees this.
    ADD COLUMN late_accepted_at timestamptz,
    ADD COLUMN late_accept_reply text,
    ADD COLUMN late_accept_message_id text,
    ADD CONSTRAINT outreach_emails_queued_not_handed_over_check
        CHECK (status <> 'queued' OR handed_over_at IS NULL),
    ADD CONSTRAINT outreach_emails_late_accept_check
        CHECK (late_accepted_at IS NULL OR (late_accept_reply IS NOT NULL
                                            AND late_accept_message_id IS NOT NULL));

COMMENT ON COLUMN outreach.emails.handed_over_at IS
    'committed right before MAIL FROM of the current attempt; NULL: never reached the SMTP server';
COMMENT ON COLUMN outreach.emails.late_accepted_at IS
    'the server accepted (2xx to the end of DATA) after the row was failed as unconfirmed';

-- A resolution records the evidence the operator saw (the late acceptance, if any).
ALTER TABLE outreach.email_resolutions ADD COLUMN evidence text;

-- Operator requeues of not-accepted failures (outreach requeue / the outreach_requeue DAG).
-- Only failure_kind 'retries_exhausted' may be requeued: nothing was accepted, so a new attempt
-- cannot send twice. Unconfirmed rows (may have gone out) have their own resolution; permanent
-- failures (5xx) would fail again.
CREATE TABLE outreach.email_requeues (
    id           bigserial PRIMARY KEY,
    email_id     bigint NOT NULL REFERENCES outreach.emails (id),
    failure_kind text NOT NULL,
    last_error   text,                          -- the failure it was requeued from
    attempts     integer NOT NULL,              -- attempts made before the requeue
    requeued_by  text NOT NULL,
    reason       text NOT NULL,
    requeued_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_email_requeues_kind_check CHECK (failure_kind = 'retries_exhausted'),
    CONSTRAINT outreach_email_requeues_by_check CHECK (length(btrim(requeued_by)) > 0),
    CONSTRAINT outreach_email_requeues_reason_check CHECK (length(btrim(reason)) > 0)
);
CREATE INDEX outreach_email_requeues_email_idx ON outreach.email_requeues (email_id);
