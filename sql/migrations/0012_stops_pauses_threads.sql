-- 0012: an enrolment can stop (an operator, a reply) and every queued step of it is cancelled in
-- the same transaction; a campaign can be paused and resumed with its history kept like the
-- mailbox pause; a sequence step can be sent as a reply in the first step's thread.
--
-- (This file only adds objects and widens checks, so it applies after any of 0008–0011.)

-- ---------------------------------------------------------------------------------------------
-- A step cancelled because its enrolment stopped is 'cancelled', not 'suppressed': the address
-- did not opt out (a suppression still makes a step 'suppressed'). Final, like 'suppressed'.
-- The new value is used only in function bodies and queries run after this migration commits
-- (PostgreSQL refuses a new enum value in the transaction that added it).
-- ---------------------------------------------------------------------------------------------

ALTER TYPE outreach.email_status ADD VALUE IF NOT EXISTS 'cancelled' AFTER 'suppressed';

-- ---------------------------------------------------------------------------------------------
-- Enrolments: 'stopped' (an operator), 'replied' (the inbox reader found a reply), with who,
-- why and when. A stop is final for that campaign: cancelled steps never go out, and step n is
-- queued only after step n-1 was sent, so there is nothing to resume.
-- ---------------------------------------------------------------------------------------------

ALTER TABLE outreach.enrollments
    ADD COLUMN stopped_at  timestamptz,
    ADD COLUMN stopped_by  text,
    ADD COLUMN stop_reason text,
    DROP CONSTRAINT outreach_enrollments_status_check,
    ADD CONSTRAINT outreach_enrollments_status_check
        CHECK (status IN ('active', 'stopped', 'replied')),
    ADD CONSTRAINT outreach_enrollments_stop_check CHECK (
        CASE WHEN status = 'active'
             THEN stopped_at IS NULL AND stopped_by IS NULL AND stop_reason IS NULL
             ELSE stopped_at IS NOT NULL AND btrim(coalesce(stopped_by, '')) <> ''
                  AND btrim(coalesce(stop_reason, '')) <> ''
        END) NOT VALID;
-- NOT VALID: enrolments stopped before this migration (by hand) have no who/why; new stops do.

-- Stop one enrolment and cancel every queued step of it, in the caller's transaction (one
-- statement each, so a stop and its cancellations commit together or not at all).
--   p_status: 'stopped' (an operator) or 'replied' (a reply was read);
--   p_reason, p_by: why and who (both non-empty), kept on the enrolment.
-- Returns how many queued emails it cancelled (status 'cancelled'). Only status = 'queued' rows
-- are touched: a row 'sending' right now belongs to its sender, whose pre-send check re-reads the
-- enrolment (sql/queries/emails.sql: email_cancel_stopped) and cancels it before the handoff.
-- Stopping an enrolment that is no longer active keeps its first status, reason and time (like a
-- mailbox pause) and still cancels any queued step of it (a queue-due run that overlapped the
-- first stop may have inserted one). An unknown enrolment id raises no_data_found.
CREATE FUNCTION outreach.stop_enrollment(p_enrollment_id bigint, p_status text, p_reason text,
                                         p_by text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_en outreach.enrollments%ROWTYPE;
    v_cancelled integer;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('stopped', 'replied') THEN
        RAISE EXCEPTION 'an enrolment stops as ''stopped'' or ''replied'', not %', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF btrim(coalesce(p_reason, '')) = '' OR btrim(coalesce(p_by, '')) = '' THEN
        RAISE EXCEPTION 'stopping an enrolment needs who (by) and why (reason)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE outreach.enrollments en
    SET status = p_status, stopped_at = now(), stopped_by = btrim(p_by),
        stop_reason = btrim(p_reason)
    WHERE en.id = p_enrollment_id AND en.status = 'active'
    RETURNING * INTO v_en;
    IF NOT FOUND THEN
        SELECT * INTO v_en FROM outreach.enrollments en WHERE en.id = p_enrollment_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no enrolment %', p_enrollment_id USING ERRCODE = 'no_data_found';
        END IF;
    END IF;
    UPDATE outreach.emails e
    SET status = 'cancelled', updated_at = now(),
        last_error = format('enrolment %s %s by %s: %s', v_en.id, v_en.status, v_en.stopped_by,
                            v_en.stop_reason)
    WHERE e.lead_id = v_en.lead_id AND e.campaign_id = v_en.campaign_id AND e.status = 'queued';
    GET DIAGNOSTICS v_cancelled = ROW_COUNT;
    RETURN v_cancelled;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Campaign pause / resume, with its history (like outreach.mailbox_events, migration 0004).
-- A paused campaign queues nothing (email_queue_due) and its queued steps are not claimed
-- (email_claim_batch checks c.status = 'active'); they stay queued and go out after a resume.
-- ---------------------------------------------------------------------------------------------

ALTER TABLE outreach.campaigns
    ADD COLUMN paused_reason text,
    ADD COLUMN paused_at     timestamptz,
    ADD COLUMN paused_by     text;

CREATE TABLE outreach.campaign_events (
    id          bigserial PRIMARY KEY,
    campaign_id bigint NOT NULL REFERENCES outreach.campaigns (id),
    event       text NOT NULL,   -- 'paused' or 'resumed'
    actor       text NOT NULL,   -- the operator
    reason      text NOT NULL,   -- why
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_campaign_events_event_check CHECK (event IN ('paused', 'resumed')),
    CONSTRAINT outreach_campaign_events_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_campaign_events_reason_check CHECK (btrim(reason) <> '')
);
CREATE INDEX outreach_campaign_events_campaign_idx
    ON outreach.campaign_events (campaign_id, created_at);

-- ---------------------------------------------------------------------------------------------
-- Threaded follow-ups: a step with thread = true is sent as a reply in the first step's thread
-- (In-Reply-To / References, "Re: " + the first step's subject as sent), only when that message
-- really went out to the lead (a send-log entry exists). The subject of every message accepted is
-- kept in the send log, so the reply's subject is the one the lead saw, even if the campaign
-- file's subject changed since. NULL: sent before this migration, or confirmed by an operator.
-- ---------------------------------------------------------------------------------------------

ALTER TABLE outreach.sequence_steps
    ADD COLUMN thread boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT outreach_sequence_steps_thread_check CHECK (NOT (thread AND position = 1));

ALTER TABLE outreach.send_log ADD COLUMN subject text;
