"""The tests' CLI calls forked from a warm interpreter (support.clifork) behave as processes of
their own: exit codes, separate output streams, the environment read anew, a timeout that kills."""

from __future__ import annotations

import os
import subprocess
import time

import psutil
import pytest

from support import clifork
from support.flow import cli_env


def server_children() -> list[psutil.Process]:
    assert clifork._server is not None and clifork._server.proc.poll() is None
    return psutil.Process(clifork._server.proc.pid).children()


def test_a_forked_call_has_its_own_exit_code_and_output_streams():
    env = dict(os.environ)
    assert clifork._forkable(env)
    ok = clifork.run(("--help",), env=env, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("usage: outreach") and ok.stderr == ""
    bad = clifork.run(("no-such-command",), env=env, timeout=60)
    assert bad.returncode == 2 and bad.stdout == "" and "invalid choice: 'no-such-command'" in bad.stderr
    assert server_children() == []  # both ended and were reaped


def test_each_call_reads_the_failpoints_of_its_own_environment():
    env = dict(os.environ)
    broken = clifork.run(("--help",), env={**env, "OUTREACH_FAILPOINTS": "nonsense:1"}, timeout=60)
    assert broken.returncode == 1 and "unknown point 'nonsense'" in broken.stderr, broken.stderr
    assert clifork.run(("--help",), env=env, timeout=60).returncode == 0  # the server kept none of it


def test_an_airflow_option_of_its_own_needs_a_fresh_interpreter():
    # Airflow reads its options on import: the server's would be the wrong ones.
    assert not clifork._forkable({**os.environ, "AIRFLOW__CORE__PARALLELISM": "3"})
    assert not clifork._forkable({**os.environ, "AIRFLOW_HOME": "/elsewhere"})


def test_a_call_past_its_timeout_is_killed(db_url, sink):
    env = cli_env(db_url, sink)
    with pytest.raises(subprocess.TimeoutExpired):
        clifork.run(("transactional", "worker"), env=env, timeout=3)  # LISTENs until stopped
    deadline = time.monotonic() + 10
    while server_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_children() == []
