-- Test sends: a campaign step rendered for a lead and sent to a seed address through the real
-- mailbox (outreach.testsend). Recorded here, never in outreach.send_log (one entry per email
-- row); each counts toward the mailbox's daily cap (trigger outreach_test_sends_count_claims).

-- name: test_send_record
-- Only after the SMTP server accepted the message: its one entry (its own Message-ID, UNIQUE).
INSERT INTO outreach.test_sends (campaign_id, step_id, lead_id, mailbox_id, recipient,
                                 message_id, smtp_reply, actor, accepted_at)
SELECT st.campaign_id, st.id, %(lead_id)s, %(mailbox_id)s, %(recipient)s, %(message_id)s,
       %(smtp_reply)s, %(actor)s, coalesce(%(now)s::timestamptz, now())
FROM outreach.sequence_steps st
WHERE st.id = %(step_id)s
RETURNING id, accepted_at;
