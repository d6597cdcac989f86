"""`outreach config check` (issue 31, item 3): every setting and connection of a deployment at
once, through the real CLI against the real test database: a deliberately broken environment is
exit 2 with one line per problem, each naming its variable or connection; a good one is exit 0
with one summary line. The DAGs' first task runs the same check (settings and database)."""

from __future__ import annotations

import json
import subprocess

import pytest

from support import clifork
from support.flow import cli_env

IMAP = {f"AIRFLOW_CONN_{c.upper()}": json.dumps({"conn_type": "imap", "host": "127.0.0.1",
                                                 "login": c.rsplit("_", 1)[1],
                                                 "password": "imap-test-password"})
        for c in ("outreach_imap_anna", "outreach_imap_ben", "outreach_imap_unsubscribe")}
"""The demo mailbox file's IMAP connections (looked up, never dialled)."""

BROKEN = {
    "OUTREACH_SMTP_TIMEOUT": "",                                 # empty
    "OUTREACH_BATCH_SIZE": "1_0",                                # underscored
    "OUTREACH_TRANSACTIONAL_RETRY_SECONDS": "10,,60",            # double comma
    "OUTREACH_PREFLIGHT": "maybe",                               # another group
    "OUTREACH_SPAM_RATE_THRESHOLD": "0.5",                       # out of range, a third group
    "OUTREACH_QUEUE_DUE_SCHEDULE": "every hour",                 # parse-time group
    "OUTREACH_BLOCK_PAUSE_COUNT": "0",                           # the bounce rules' group
    "OUTREACH_ESP_REPLAY_WINDOW_SECONDS": "5",                   # the webhooks' group
}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return clifork.run(("config", "check", *args), env=env, timeout=300)


def test_a_broken_environment_names_every_problem_one_line_each(db_url, sink, tmp_path):
    env = cli_env(db_url, sink, **IMAP, **BROKEN)
    del env["AIRFLOW_CONN_OUTREACH_SMTP_BEN"]   # a connection the mailbox file names
    proc = run(env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    problems = [line for line in lines if line.startswith("outreach: config: ")]
    assert lines[-1] == f"config check: {len(problems)} problem(s)"
    for variable in BROKEN:
        [line] = [p for p in problems if f": {variable}" in p]  # exactly one line each
    assert any("'outreach_smtp_ben'" in p and "AIRFLOW_CONN_OUTREACH_SMTP_BEN" in p for p in problems)
    assert len(problems) == len(BROKEN) + 1, problems
    assert "OUTREACH_SMTP_TIMEOUT is set but empty" in proc.stderr
    assert "OUTREACH_BATCH_SIZE='1_0' is not allowed" in proc.stderr
    assert "OUTREACH_TRANSACTIONAL_RETRY_SECONDS='10,,60' is not allowed" in proc.stderr


def test_an_unreachable_database_and_a_missing_secret_are_named_too(db_url, sink, tmp_path):
    env = cli_env(db_url, sink, **IMAP,
                  OUTREACH_DATABASE_URL="postgresql:///nowhere?host=/nonexistent")
    del env["OUTREACH_UNSUBSCRIBE_SECRET"]
    proc = run(env, "--skip", "connections")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    problems = [line for line in proc.stderr.splitlines() if line.startswith("outreach: config: ")]
    assert len(problems) == 2, problems
    assert "set OUTREACH_UNSUBSCRIBE_SECRET" in problems[0]
    assert "outreach database: cannot connect" in problems[1]


def test_a_good_environment_passes_with_one_line(db_url, sink, tmp_path):
    proc = run(cli_env(db_url, sink, **IMAP))
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.strip().splitlines()  # one line: nothing else on stdout
    assert line.startswith("config check: OK (settings, 3 mailbox(es), 1 campaign file(s), "
                           "database (migration ") and line.endswith(", 6 connection(s))"), line
    assert proc.stderr == ""


def test_the_dags_first_task_fails_with_every_problem_in_one_line(db_url, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.airflow.tasks_common import config_check_task

    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", "https://unsubscribe.test.example")
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", "test-secret-0123456789")
    config_check_task(marketing=True)  # nothing wrong: no exception
    for name, value in BROKEN.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(AirflowFailException) as exc:
        config_check_task(marketing=True)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"config check: {len(BROKEN)} problem(s): ")
    assert all(name in message for name in BROKEN), message
