-- 0014: what operators see in the Airflow UI — a mailbox's label, and alerts sent once.
--
-- (Other helpers' migrations may sort between 0007 and this one; it only adds objects.)

-- The name operators know a mailbox by ("anna — sales"), from `label` in the mailbox file. Logs
-- and task labels show it instead of the address (never the full address in logs); '' until the
-- mailbox file is synced, shown then as the display name or the masked address.
ALTER TABLE outreach.mailboxes ADD COLUMN label text NOT NULL DEFAULT '',
    ADD CONSTRAINT outreach_mailboxes_label_check CHECK (length(label) <= 80 AND label !~ '[[:cntrl:]]');

-- One row per alert event (a mailbox paused, an unconfirmed email, a failed send run, a preflight
-- FAIL, a bounce-rate warning; 'required_action': an unconfirmed email listed in a Required
-- Action, so each is listed once). The UNIQUE event key is what makes an alert go out once however
-- many tasks, retries or overlapping runs see the same event: the sender is whoever's
-- INSERT … ON CONFLICT DO NOTHING RETURNING returns the row, and it commits only after the
-- notifier delivered (a failed delivery rolls back, so the next run tries again).
CREATE TABLE outreach.alerts (
    id         bigserial PRIMARY KEY,
    event_key  text NOT NULL,   -- e.g. 'paused:42', 'unconfirmed:288', 'review:288', 'run-failed:outreach_send:<run id>'
    kind       text NOT NULL,   -- paused, unconfirmed, run_failed, preflight_fail, bounce_warning, required_action
    subject    text NOT NULL,
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_alerts_event_key_key UNIQUE (event_key),
    CONSTRAINT outreach_alerts_kind_check CHECK (
        kind IN ('paused', 'unconfirmed', 'run_failed', 'preflight_fail', 'bounce_warning',
                 'required_action'))
);
CREATE INDEX outreach_alerts_created_idx ON outreach.alerts (created_at);
