-- 0103: the content version of every send (issue 24, item 5): which copy (template sources,
-- subject, thread, campaign name; outreach.content.content_version) the message was built from.
-- NULL for sends before this migration and for operator confirmations (email_resolve_was_sent).
ALTER TABLE outreach.send_log ADD COLUMN content_version text;
