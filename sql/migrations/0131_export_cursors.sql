-- 0131: the warehouse export's cursor (issue 26, item 3; outreach.export). One row per export
-- target (a name the operator picks: "warehouse", "lake"), holding how far that target has the
-- event log, as a position in the order (xact, id) of outreach.events.
--
-- Why (xact, id) and not an id (0104 says it in full): neither ids nor xacts are commit-ordered,
-- but every row with xact < pg_snapshot_xmin(pg_current_snapshot()) is final, so the rows below a
-- reader's xmin, sorted by (xact, id), form a prefix that never changes. done_* is the last row of
-- that prefix the target durably has; a run reads after it, below its own xmin, at most a batch.
--
-- A batch is planned before it is written: planned_* is the last row of the batch being written,
-- set by a guarded UPDATE (planned IS NULL and done unchanged), and moved into done_* by another
-- (done and planned unchanged) only after the target has the rows. A run killed in between finds
-- the plan and writes exactly the same rows again (same file name, same event ids), so the target
-- never gets a gap or a second copy; two overlapping runs cannot both plan or both advance.
CREATE TABLE outreach.export_cursors (
    target       text PRIMARY KEY,
    done_xact    xid8 NOT NULL DEFAULT '0'::xid8,
    done_id      bigint NOT NULL DEFAULT 0,
    planned_xact xid8,
    planned_id   bigint,
    exported     bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_export_cursors_target_check CHECK (target ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    CONSTRAINT outreach_export_cursors_planned_check
        CHECK ((planned_xact IS NULL) = (planned_id IS NULL))
);

-- The export reads the log in (xact, id) order from a position.
-- 0130 made it on (xact) for webhooks; (xact, id) serves both.
DROP INDEX outreach.outreach_events_xact_idx;
CREATE INDEX outreach_events_xact_idx ON outreach.events (xact, id);
