-- 0011: the inbound half — every mailbox's inbox is read (outreach.inbox), each message recorded
-- once under UNIQUE constraints and its effect applied in the same transaction as its record.
--
-- (Only adds objects, so it applies after the migrations around it.)

-- ---------------------------------------------------------------------------------------------
-- Where a mailbox's mail is read (Airflow connection ids: secrets never live here)
-- ---------------------------------------------------------------------------------------------

ALTER TABLE outreach.mailboxes
    ADD COLUMN imap_conn_id text,              -- the mailbox's own IMAP account (conn type imap)
    -- The account that receives List-Unsubscribe's mailto:unsubscribe@<domain>, when that
    -- address is not delivered into the mailbox's own inbox. Several mailboxes of one domain
    -- name the same connection; the reader reads each account once.
    ADD COLUMN unsubscribe_imap_conn_id text;

ALTER TABLE outreach.campaigns
    -- An automatic reply (out of office…) stops the lead's enrolment too (default: it does not).
    ADD COLUMN stop_on_auto_reply boolean NOT NULL DEFAULT false,
    -- A reply stops every other lead of the replying lead's company domain in this campaign.
    ADD COLUMN stop_on_domain_reply boolean NOT NULL DEFAULT false;

-- (The enrolment status 'replied' and outreach.stop_enrollment, which the reader calls, come with
-- migration 0012.)

-- ---------------------------------------------------------------------------------------------
-- Inbound messages: one row per message read, whatever the retries, clears and overlapping runs
-- ---------------------------------------------------------------------------------------------

-- The reader inserts a message's row with ON CONFLICT DO NOTHING RETURNING id and applies the
-- message's effect (a suppression, an enrolment stopped, a bounce counted) only when the insert
-- returned a row, in the same transaction: of two readers on one message exactly one records it
-- and applies its effect; a reader killed before its commit leaves neither.
CREATE TABLE outreach.inbound_messages (
    id           bigserial PRIMARY KEY,
    account      text NOT NULL,     -- the Airflow IMAP connection id the message was read from
    folder       text NOT NULL,     -- the IMAP mailbox (folder) read, 'INBOX'
    uidvalidity  bigint NOT NULL,   -- RFC 3501 §2.3.1.1: a new UIDVALIDITY voids every UID
    uid          bigint NOT NULL,
    -- The sending mailbox whose inbox this is; NULL for a shared unsubscribe account.
    mailbox_id   bigint REFERENCES outreach.mailboxes (id),
    -- The Message-ID header without <>, or 'sha256:<hex of the message>' when it has none. It
    -- identifies the message across folders and UIDVALIDITY changes.
    message_id   text NOT NULL,
    from_address text NOT NULL DEFAULT '',   -- lower-case From address ('' when none)
    subject      text NOT NULL DEFAULT '',   -- at most 200 characters
    class        text NOT NULL,
    evidence     text NOT NULL,              -- which header or part decided the class
    email_id     bigint REFERENCES outreach.emails (id),  -- our email it answers/bounces/reports
    lead_id      bigint REFERENCES outreach.leads (id),
    address      text,                       -- the address an effect concerns
    dsn_status   text,                       -- a DSN's Status (RFC 3463: 5.1.1, 4.4.1…) when known
    effect       text NOT NULL DEFAULT 'none',  -- what was applied, for people
    received_at  timestamptz,                -- the server's INTERNALDATE
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_inbound_messages_uid_key UNIQUE (account, folder, uidvalidity, uid),
    CONSTRAINT outreach_inbound_messages_message_id_key UNIQUE (account, message_id),
    CONSTRAINT outreach_inbound_messages_class_check CHECK (class IN (
        'hard_bounce',  -- permanent failure (DSN 5.x.x): the address is suppressed 'bounced'
        'soft_bounce',  -- transient failure or delay (4.x.x): recorded only
        'complaint',    -- ARF feedback report (RFC 5965): suppressed 'complained'
        'unsubscribe',  -- mail to the List-Unsubscribe mailto, or "unsubscribe" as first line
        'auto_reply',   -- RFC 3834 and the common out-of-office forms: recorded only (by default)
        'reply',        -- a person answered one of our emails: the enrolment stops ('replied')
        'unmatched'))   -- anything else, or a reply we cannot tie to a lead: no effect
);
-- Hard bounces and complaints are counted per email (the bounce- and complaint-rate rules).
CREATE INDEX outreach_inbound_messages_email_idx ON outreach.inbound_messages (email_id, class)
    WHERE email_id IS NOT NULL;

-- How far the reader got in each account's folder under one UIDVALIDITY: the next run asks the
-- server only for UIDs above last_uid. Advanced in the same transaction as each message's row,
-- only upwards (greatest), so an older reader finishing late never moves it back. A cursor is an
-- optimisation: the UNIQUE constraints above are what keep a message from counting twice.
CREATE TABLE outreach.inbound_cursors (
    account     text NOT NULL,
    folder      text NOT NULL,
    uidvalidity bigint NOT NULL,
    last_uid    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outreach_inbound_cursors_pkey PRIMARY KEY (account, folder, uidvalidity)
);
