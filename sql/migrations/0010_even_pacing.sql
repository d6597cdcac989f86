-- 0010: pacing that never bursts (issue 12 item 7). A day's sends are spread evenly over the
-- whole send window, and sends of one mailbox keep a minimum gap. The rule itself is written once,
-- in sql/queries/emails.sql (mailbox_remaining_today, mailbox_reserve_handoffs); this file adds
-- what it needs and drops the function it replaces (used by no other query).

-- ---------------------------------------------------------------------------------------------
-- Pacing: where today's sending starts and ends
-- ---------------------------------------------------------------------------------------------

-- The span of the window [win_start, win_end) of one of `days` (ISO weekdays) in time zone `tz`
-- within [after, until): `opens`, the earliest moment in it at which the window is open (clipped
-- to `after`), and `closes`, the latest (the end of the last stretch that overlaps, clipped to
-- `until`); both NULL when the window is closed throughout. Pacing counts the send runs of the
-- mailbox's full day window between the two, so the steady rate does not depend on when sending
-- started. Local times become instants by PostgreSQL's time zone rules, as in
-- outreach.next_send_slot. It replaces outreach.send_window_close (0004), which gave only `closes`.
CREATE FUNCTION outreach.send_window_span(after timestamptz, until timestamptz, tz text,
                                          days integer[], win_start time, win_end time,
                                          OUT opens timestamptz, OUT closes timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    d date;
    o timestamptz;
    c timestamptz;
BEGIN
    -- A window of the previous local day can still be open at `after` (win_end is at most 24:00).
    d := (after AT TIME ZONE tz)::date - 1;
    WHILE d <= (until AT TIME ZONE tz)::date LOOP
        IF extract(isodow FROM d)::integer = ANY (days) THEN
            o := (d + win_start) AT TIME ZONE tz;
            c := (d + win_end) AT TIME ZONE tz;
            IF o < until AND c > after THEN
                opens := least(opens, greatest(o, after));
                closes := greatest(closes, least(c, until));
            END IF;
        END IF;
        d := d + 1;
    END LOOP;
END
$$;

DROP FUNCTION outreach.send_window_close(timestamptz, timestamptz, text, integer[], time, time);

-- ---------------------------------------------------------------------------------------------
-- The gap between two handoffs of one mailbox
-- ---------------------------------------------------------------------------------------------

-- The earliest moment the next claimed row of this mailbox may be handed to its SMTP server.
-- Moved forward by one jittered gap for each row a claim takes (mailbox_reserve_handoffs, under
-- the mailbox lock of the claim), so concurrent batches and overlapping runs share one chain.
-- NULL: never claimed since this column exists (no wait).
ALTER TABLE outreach.mailboxes ADD COLUMN next_handoff_at timestamptz;
