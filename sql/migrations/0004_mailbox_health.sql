-- 0004: mailbox health — who paused or resumed a mailbox and why, the figures Google Postmaster
-- Tools reports for our domains, and the send-window horizon that paces a mailbox's day.
--
-- (0002 and 0003 are other changes; this file only adds objects, so it applies after either.)

-- ---------------------------------------------------------------------------------------------
-- Pause / resume history
-- ---------------------------------------------------------------------------------------------

-- One row per change of outreach.mailboxes.status, written by the same statement as the change
-- (sql/queries/mailboxes.sql: mailbox_pause, mailbox_resume), so the history cannot miss one.
CREATE TABLE outreach.mailbox_events (
    id         bigserial PRIMARY KEY,
    mailbox_id bigint NOT NULL REFERENCES outreach.mailboxes (id),
    event      text NOT NULL,   -- 'paused' or 'resumed'
    actor      text NOT NULL,   -- the operator; 'postmaster' or 'bounce-rate' for automatic pauses
    reason     text NOT NULL,   -- why (a pause's figure and date; a resume's justification)
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_mailbox_events_event_check CHECK (event IN ('paused', 'resumed')),
    CONSTRAINT outreach_mailbox_events_actor_check CHECK (btrim(actor) <> ''),
    CONSTRAINT outreach_mailbox_events_reason_check CHECK (btrim(reason) <> '')
);
CREATE INDEX outreach_mailbox_events_mailbox_idx ON outreach.mailbox_events (mailbox_id, created_at);

-- ---------------------------------------------------------------------------------------------
-- Google Postmaster Tools figures (API v2, domains.domainStats.query)
-- ---------------------------------------------------------------------------------------------

-- One row per domain, metric (and feedback-loop id) and day. A day the API did not report is
-- stored as unknown (value NULL, has_data false), never as 0: Postmaster omits days with too
-- little traffic, and "no data" says nothing about the spam rate.
CREATE TABLE outreach.postmaster_stats (
    domain           text NOT NULL,
    metric           text NOT NULL,
    feedback_loop_id text NOT NULL DEFAULT '',  -- '' for the domain-wide SPAM_RATE
    day              date NOT NULL,             -- the day the figure describes
    value            double precision,          -- a fraction: 0.001 = 0.1 %; NULL = no data
    has_data         boolean NOT NULL,
    fetched_at       timestamptz NOT NULL DEFAULT now(),  -- last time the API was asked
    updated_at       timestamptz NOT NULL DEFAULT now(),  -- last time the figure changed
    CONSTRAINT outreach_postmaster_stats_pkey PRIMARY KEY (domain, metric, feedback_loop_id, day),
    CONSTRAINT outreach_postmaster_stats_metric_check CHECK (
        metric IN ('SPAM_RATE', 'FEEDBACK_LOOP_SPAM_RATE')
        AND (metric = 'FEEDBACK_LOOP_SPAM_RATE') = (feedback_loop_id <> '')),
    CONSTRAINT outreach_postmaster_stats_value_check CHECK (
        has_data = (value IS NOT NULL) AND (value IS NULL OR value BETWEEN 0 AND 1))
);

-- The latest compliance verdicts of a domain (domains.getComplianceStatus), one row per day.
CREATE TABLE outreach.postmaster_compliance (
    domain     text NOT NULL,
    day        date NOT NULL,            -- the UTC day it was fetched
    needs_work text[] NOT NULL DEFAULT '{}',  -- requirements not COMPLIANT
    status     jsonb NOT NULL,           -- the API's response, as returned
    fetched_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_postmaster_compliance_pkey PRIMARY KEY (domain, day)
);

-- ---------------------------------------------------------------------------------------------
-- Pacing: where today's sending ends
-- ---------------------------------------------------------------------------------------------

-- The latest moment in [after, until) at which the window [win_start, win_end) of one of `days`
-- (ISO weekdays) in time zone `tz` is still open — the end of the last stretch of the window that
-- overlaps [after, until), clipped to `until` — or NULL when the window is closed throughout.
-- Pacing divides what a mailbox may still send today over the send runs left before this moment.
-- Local times become instants by PostgreSQL's time zone rules, as in outreach.next_send_slot.
CREATE FUNCTION outreach.send_window_close(after timestamptz, until timestamptz, tz text,
                                           days integer[], win_start time, win_end time)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    d date;
    opens timestamptz;
    closes timestamptz;
    latest timestamptz;
BEGIN
    -- A window of the previous local day can still be open at `after` (win_end is at most 24:00).
    d := (after AT TIME ZONE tz)::date - 1;
    WHILE d <= (until AT TIME ZONE tz)::date LOOP
        IF extract(isodow FROM d)::integer = ANY (days) THEN
            opens := (d + win_start) AT TIME ZONE tz;
            closes := (d + win_end) AT TIME ZONE tz;
            IF opens < until AND closes > after THEN
                latest := greatest(latest, least(closes, until));
            END IF;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN latest;
END
$$;
