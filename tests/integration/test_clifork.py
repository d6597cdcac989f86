"""The tests' CLI calls forked from a warm interpreter (support.clifork) behave as processes of
their own: exit codes, separate output streams, the environment read anew, a timeout that kills,
a started call the test can signal."""

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


def test_an_interrupted_wait_kills_the_call(db_url, sink):
    import signal

    def interrupt(*_):
        raise KeyboardInterrupt

    env = cli_env(db_url, sink)
    assert clifork.run(("--help",), env=env, timeout=60).returncode == 0  # the server is up
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.alarm(2)
        with pytest.raises(KeyboardInterrupt):  # as pytest-timeout or Ctrl-C would end the wait
            clifork.run(("transactional", "worker"), env=env, timeout=60)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    deadline = time.monotonic() + 10
    while server_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_children() == []
    assert clifork.run(("--help",), env=dict(os.environ), timeout=60).returncode == 0  # still serving


def test_a_request_of_any_size_and_several_calls_at_once():
    from concurrent.futures import ThreadPoolExecutor

    env = {**os.environ, "OUTREACH_TEST_BIG": "x" * 200_000}
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda _: clifork.run(("--help",), env=env, timeout=60), range(8)))
    assert [p.returncode for p in done] == [0] * 8


@pytest.mark.parametrize("fork", ["on", "off"])
def test_the_cli_logs_to_stderr_whether_forked_or_not(db_url, sink, fork, monkeypatch):
    # `campaign pause` imports no Airflow; `send` does (its SMTP connection): in a process of its
    # own each puts the outreach log lines on stderr (outreach.cli._configure_logging), never in
    # Airflow's format on stdout.
    from outreach.queue import queue_due
    from support.flow import import_demo

    monkeypatch.setenv("OUTREACH_TEST_CLI_FORK", fork)
    import_demo(db_url)
    queue_due(db_url)
    env = cli_env(db_url, sink)
    sent = clifork.run(("-v", "send", "--limit", "2"), env=env, timeout=120)
    assert sent.returncode == 0 and "sent=2" in sent.stdout, sent.stdout + sent.stderr
    assert "INFO outreach" in sent.stderr
    assert "[info" not in sent.stdout and "INFO outreach" not in sent.stdout, sent.stdout
    paused = clifork.run(("campaign", "pause", "q4-ops-intro", "--by", "alice", "--reason", "legal review"),
                         env=env, timeout=120)
    assert paused.returncode == 0, paused.stderr
    assert "WARNING outreach" in paused.stderr and "paused by alice" in paused.stderr
    assert "paused by alice" not in paused.stdout


def test_a_started_call_is_a_process_the_test_can_signal(db_url, sink):
    import signal

    env = cli_env(db_url, sink)
    with clifork.start(("transactional", "worker"), env=env) as worker:  # LISTENs until stopped
        assert isinstance(worker, clifork.Call)
        assert worker.pid in {p.pid for p in server_children()}
        time.sleep(0.5)
        assert worker.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(timeout=0.5)  # still running, not killed by the wait
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(timeout=30) == -signal.SIGKILL and worker.poll() == -signal.SIGKILL
    with clifork.start(("no-such-command",), env=env, merge_stderr=True) as bad:
        out, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err is None and "invalid choice: 'no-such-command'" in out
    assert server_children() == []


def test_a_dead_fork_server_takes_its_calls_with_it(tmp_path):
    """A call outlives no server (PR_SET_PDEATHSIG), and its end reads as a SIGKILL."""
    import signal

    prelude = ("import time, outreach.failpoints\n"
               "def child_main(req):\n    print('asleep', flush=True)\n    time.sleep(600)\n")
    server = clifork.ForkServer(prelude, dict(os.environ), "test fork server", folder=tmp_path / "server")
    with open(os.devnull, "rb") as null_in, open(tmp_path / "out", "wb") as out:
        call = clifork.Forked(server, ["sleeper"], [null_in.fileno(), out.fileno(), out.fileno()],
                              {"env": dict(os.environ), "cwd": str(tmp_path)})
    deadline = time.monotonic() + 30
    while (tmp_path / "out").read_text() != "asleep\n":
        assert time.monotonic() < deadline and call.poll() is None, (tmp_path / "out").read_text()
        time.sleep(0.1)
    server.proc.kill()
    assert call.wait(30) == -signal.SIGKILL
    assert not psutil.pid_exists(call.pid)
    server.proc.stdin.close()
    server.proc.wait()
