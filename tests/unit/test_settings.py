"""Settings that switch safety off (issue 12.5): every OUTREACH_* setting is parsed once, with a
range, and a bad value is one line naming the variable and what is allowed — through the real CLI
(exit 2), never a traceback, never silently another value."""

from __future__ import annotations

import subprocess

import pytest

from outreach.settings import PreflightSettings, ScheduleSettings, Settings, SettingsError
from support.flow import outreach_cmd
from support.paths import ROOT

BASE = {"OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
        "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
        "OUTREACH_DATABASE_URL": "postgresql:///never-reached?host=/nonexistent",
        "OUTREACH_HOME": str(ROOT)}


def run_cli(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("OUTREACH_")}
    full.update(BASE, AIRFLOW_HOME=str(tmp_path / "af"), **env)
    return subprocess.run(outreach_cmd(*args), env=full, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("variable,value,allowed", [
    ("OUTREACH_SMTP_TIMEOUT", "0", "1 to 600"),           # zero: used to disable the checks
    ("OUTREACH_SMTP_TIMEOUT", "-5", "1 to 600"),          # negative
    ("OUTREACH_REAPER_MINUTES", "inf", "1 to 1440"),      # inf: used to end in a traceback
    ("OUTREACH_REAPER_MINUTES", "1e12", "1 to 1440"),     # huge: used to end in a traceback
    ("OUTREACH_SMTP_TIMEOUT", "nan", "1 to 600"),
    ("OUTREACH_BATCH_SIZE", "fifty", "1 to 10000"),       # not a number
    ("OUTREACH_BATCH_SIZE", "0", "1 to 10000"),
    ("OUTREACH_SEND_PARALLELISM", "5000", "1 to 1024"),
    ("OUTREACH_SEND_INTERVAL_MINUTES", "-1", "0 (no pacing) to 1440"),
    ("OUTREACH_TRANSACTIONAL_RETRY_SECONDS", "10,0", "each 1 to 3600"),
])
def test_a_bad_sender_setting_is_one_line_naming_the_variable(tmp_path, variable, value, allowed):
    proc = run_cli(tmp_path, "send", **{variable: value})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"outreach: error: {variable}=") and allowed in line, line


@pytest.mark.parametrize("variable,value", [
    ("OUTREACH_BOUNCE_MIN_SENDS", "0"), ("OUTREACH_BOUNCE_WINDOW_DAYS", "inf"),
    ("OUTREACH_BOUNCE_RATE_THRESHOLD", "-0.1"), ("OUTREACH_SPAM_RATE_THRESHOLD", "0.5"),
])
def test_a_bad_health_setting_is_one_line_too(tmp_path, variable, value):
    proc = run_cli(tmp_path, "mailbox", "check-bounces", **{variable: value})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"outreach: error: {variable}=") and "is not allowed" in line, line


def test_a_reaper_shorter_than_one_handoff_is_refused(tmp_path):
    proc = run_cli(tmp_path, "send", OUTREACH_SMTP_TIMEOUT="300", OUTREACH_REAPER_MINUTES="30")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "OUTREACH_REAPER_MINUTES (0:30:00) must exceed the longest one SMTP handoff" in line


def test_the_secret_is_never_echoed(tmp_path):
    proc = run_cli(tmp_path, "send", OUTREACH_UNSUBSCRIBE_SECRET="short-secret")
    assert proc.returncode == 2 and "short-secret" not in proc.stderr, proc.stderr
    assert "OUTREACH_UNSUBSCRIBE_SECRET is not allowed: at least 16 characters" in proc.stderr


def test_every_default_holds_and_the_other_groups_refuse_bad_values(monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("OUTREACH_"):
            monkeypatch.delenv(name)
    s = Settings(public_url="https://x.example", unsubscribe_secret="x" * 16)
    assert (s.batch_size, s.smtp_timeout, s.reaper_minutes, s.send_interval_minutes,
            s.send_parallelism, s.feedback_sender_id) == (50, 30.0, 30.0, 10, 4, "outreach")
    assert (PreflightSettings().preflight, ScheduleSettings().schedules) == ("warn", "on")
    monkeypatch.setenv("OUTREACH_PREFLIGHT", "maybe")
    with pytest.raises(SettingsError, match="OUTREACH_PREFLIGHT='maybe' is not allowed: .*block, warn or off"):
        PreflightSettings()
    monkeypatch.setenv("OUTREACH_SCHEDULES", "sometimes")
    with pytest.raises(SettingsError, match="OUTREACH_SCHEDULES='sometimes'"):
        ScheduleSettings()
    monkeypatch.setenv("OUTREACH_SENDING_IP", "not-an-ip")
    monkeypatch.setenv("OUTREACH_PREFLIGHT", "BLOCK")
    with pytest.raises(SettingsError, match="OUTREACH_SENDING_IP='not-an-ip'"):
        PreflightSettings()


@pytest.mark.parametrize("variable,value,why", [
    ("OUTREACH_SMTP_TIMEOUT", "", "is set but empty"),               # used to mean the default
    ("OUTREACH_BATCH_SIZE", "", "is set but empty"),
    ("OUTREACH_SMTP_TIMEOUT", "1_0", "not a plain decimal number"),  # int('1_0') == 10
    ("OUTREACH_BATCH_SIZE", "1_000", "not a plain decimal number"),
    ("OUTREACH_SEND_GAP_SECONDS", "0x10", "not a plain decimal number"),
    ("OUTREACH_BATCH_SIZE", "10.0", "not a plain decimal number"),    # a whole number field
    ("OUTREACH_TRANSACTIONAL_RETRY_SECONDS", "10,,60", "an empty item between commas"),
    ("OUTREACH_TRANSACTIONAL_RETRY_SECONDS", "10,60,", "an empty item between commas"),
    ("OUTREACH_TRANSACTIONAL_RETRY_SECONDS", "1_0,60", "not a plain whole number"),
    ("OUTREACH_TRANSACTIONAL_RETRY_SECONDS", "", "is set but empty"),
])
def test_empty_underscored_and_malformed_values_are_refused(monkeypatch, variable, value, why):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as exc:
        Settings(public_url="https://x.example", unsubscribe_secret="x" * 16)
    [line] = exc.value.problems
    assert line.startswith(f"{variable}") and why in line, line


@pytest.mark.parametrize("variable,value", [
    ("OUTREACH_ALERT_TO", "ops@x.example,,oncall@x.example"), ("OUTREACH_ALERT_FROM", " "),
    ("OUTREACH_SENDING_IP", ""), ("OUTREACH_QUEUE_DUE_WORKERS", "1_0"),
    ("OUTREACH_BOUNCE_MIN_SENDS", "2_0"), ("OUTREACH_SPAM_RATE_THRESHOLD", ""),
])
def test_every_group_takes_the_same_rule(monkeypatch, variable, value):
    from outreach.settings import groups

    monkeypatch.setenv(variable, value)
    refused = []
    for group in (*groups(), __import__("outreach.settings").settings.AlertSettings):
        try:
            group(**({"public_url": "https://x.example", "unsubscribe_secret": "x" * 16}
                     if group is Settings else {}))
        except SettingsError as exc:
            refused.append(str(exc))
    assert refused and all(variable in line for line in refused), refused


def test_plain_numbers_and_lists_still_read(monkeypatch):
    for name, value in {"OUTREACH_SMTP_TIMEOUT": " 12 ", "OUTREACH_SEND_GAP_JITTER": ".25",
                        "OUTREACH_SEND_GAP_SECONDS": "1e1", "OUTREACH_BATCH_SIZE": "+20",
                        "OUTREACH_TRANSACTIONAL_RETRY_SECONDS": "5, 30 ,60"}.items():
        monkeypatch.setenv(name, value)
    s = Settings(public_url="https://x.example", unsubscribe_secret="x" * 16)
    assert (s.smtp_timeout, s.send_gap_jitter, s.send_gap_seconds, s.batch_size,
            s.transactional_retry_seconds) == (12.0, 0.25, 10.0, 20, (5, 30, 60))


def test_import_roots_refuse_an_empty_item(tmp_path):
    from outreach.settings import import_roots

    with pytest.raises(SettingsError, match=r"OUTREACH_IMPORT_ROOTS='.*,,.*' is not allowed"):
        import_roots({"OUTREACH_IMPORT_ROOTS": f"{tmp_path},,{tmp_path}"})


def test_esp_keys_are_checked_for_what_they_are():
    """A webhook key that cannot verify anything is a setting error, not a 503 at every event."""
    from outreach.settings import EspSettings, SettingsError

    with pytest.raises(SettingsError, match="OUTREACH_SENDGRID_WEBHOOK_PUBLIC_KEY"):
        EspSettings(sendgrid_webhook_public_key="A" * 40)
    with pytest.raises(SettingsError, match="not an SNS topic ARN"):
        EspSettings(ses_topic_arns=("not-an-arn", "*"))
    assert EspSettings(ses_topic_arns=("arn:aws:sns:eu-west-1:123456789012:outreach-ses",)).ses_topic_arns
