"""A DAG run in a process of its own (outreach.dev.localairflow.run_dag: ``make demo``, the
bench, DAG tests that need their own process) whose Airflow process dies mid-run: the result is
a failure with the process's exit code, and its log still holds the run's own output and id.
Real Airflow (``dags test``), a one-task DAG that naps, a real SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import psutil
import pytest

from outreach.dev.localairflow import airflow_env, ensure_metadata, run_dag
from support.airflowhome import fresh_home

NAPPER = '''
import os
import time
import pendulum
from airflow.sdk import dag, task

@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def napper():
    @task
    def nap():
        print("napping now in", os.getpid(), flush=True)  # dags test runs it in its own process
        time.sleep(300)
    nap()

napper()
'''


def _session_pid(log) -> int | None:
    """The pid of the Airflow session process running the napper, once its task said it naps."""
    found = re.search(r"napping now in (\d+)", log.read_text()) if log.exists() else None
    return int(found.group(1)) if found else None


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_when_napping(log, deadline: float) -> None:
    """SIGKILL the Airflow session process once its task prints that it naps."""
    while time.monotonic() < deadline:
        if pid := _session_pid(log):
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.2)


@pytest.mark.airflow
def test_a_run_whose_process_is_killed_fails_and_keeps_its_log_and_run_id(
        tmp_path, migrated_airflow_home):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "napper.py").write_text(NAPPER)
    env = airflow_env(fresh_home(migrated_airflow_home, tmp_path, "airflow-home"), "unused", {})
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    ensure_metadata(env)
    log = tmp_path / "napper.log"
    killer = threading.Thread(target=_kill_when_napping, args=(log, time.monotonic() + 240))
    killer.start()
    try:
        result = run_dag(env, "napper", log, timeout=280)
    finally:
        killer.join()
    assert not result.ok and result.returncode == -signal.SIGKILL
    text = log.read_text()
    assert "napping now" in text  # the run's own output, not only the process's last words
    assert f"the Airflow process exited ({-signal.SIGKILL}) before the run ended" in text
    assert result.run_id and result.run_id.startswith("manual__")


class Interrupted(Exception):
    """What the test's SIGUSR1 handler raises in the middle of run_dag."""


@pytest.mark.airflow
def test_an_interrupt_during_the_run_ends_it_there_and_then(tmp_path, migrated_airflow_home):
    """An exception in the caller while the run goes on (an interrupt: here SIGUSR1 once the
    task naps) kills the process before it propagates: the task, which ticks into a file every
    0.2 s, ticks a few times more at most (before, the process was left up to 60 s to end on its
    own: ~300 ticks), and not at all once run_dag has raised."""
    dags = tmp_path / "dags"
    dags.mkdir()
    ticks = tmp_path / "ticks"
    (dags / "napper.py").write_text(NAPPER.replace(
        "time.sleep(300)", f"[(open({str(ticks)!r}, 'a').write('.'), time.sleep(0.2)) for _ in range(1500)]"))
    env = airflow_env(fresh_home(migrated_airflow_home, tmp_path, "airflow-home"), "unused", {})
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    ensure_metadata(env)

    def interrupt(*_):
        raise Interrupted

    at_alarm: list[int] = []

    def alarm_when_napping() -> None:
        while not ticks.exists():
            time.sleep(0.1)
        at_alarm.append(len(ticks.read_text()))
        os.kill(os.getpid(), signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, interrupt)
    threading.Thread(target=alarm_when_napping, daemon=True).start()
    try:
        with pytest.raises(Interrupted):
            run_dag(env, "napper", tmp_path / "napper.log", timeout=280)
    finally:
        signal.signal(signal.SIGUSR1, old)
    after = len(ticks.read_text())
    assert after - at_alarm[0] < 25, (at_alarm, after)
    pid = _session_pid(tmp_path / "napper.log")
    assert pid and not _running(pid)
    time.sleep(1)
    assert len(ticks.read_text()) == after  # nothing of the run went on
