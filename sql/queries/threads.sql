-- Threaded follow-ups (migration 0012): a step with thread = true is sent as a reply in the first
-- step's thread, only when that first message really went out to the lead.

-- name: email_thread
-- The thread a claimed email of a threaded step replies in: the messages of the same lead in the
-- same campaign that went out (a send-log entry: accepted by the server, or confirmed by an
-- operator from Sent Items) for step 1 and for every earlier threaded step, oldest first, with
-- the Subject as sent (NULL: sent before migration 0012, or confirmed by an operator) and step
-- 1's template and subject for that case. No row for position 1: step 1 was not sent to this lead
-- (it failed, was cancelled, or the row was made by hand), and the step is sent as a new message.
SELECT st.position, s.message_id, s.subject, st.template, st.subject AS subject_template
FROM outreach.emails e
JOIN outreach.sequence_steps cur ON cur.id = e.step_id
JOIN outreach.sequence_steps st ON st.campaign_id = cur.campaign_id
                               AND st.position < cur.position AND (st.position = 1 OR st.thread)
JOIN outreach.emails pe ON pe.lead_id = e.lead_id AND pe.step_id = st.id
JOIN outreach.send_log s ON s.email_id = pe.id
WHERE e.id = %(email_id)s AND cur.thread
ORDER BY st.position;
