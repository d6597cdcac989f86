-- 0020 (issue 18): an alert kind for refused logins (outreach.oauth.LoginRefused: a 535 or
-- AUTHENTICATIONFAILED, a revoked OAuth key or consent, missing domain-wide delegation), sent
-- once per connection and UTC day (event key login-failed:<conn id>:<day>).
ALTER TABLE outreach.alerts DROP CONSTRAINT outreach_alerts_kind_check;
ALTER TABLE outreach.alerts ADD CONSTRAINT outreach_alerts_kind_check CHECK (
    kind IN ('paused', 'unconfirmed', 'run_failed', 'preflight_fail', 'bounce_warning',
             'required_action', 'login_failed'));
