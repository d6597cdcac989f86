"""Deployment.stop (outreach.dev.deploy): the api-server is stopped last, so that a task still
running when the scheduler is told to stop can report its state through it. Real child
processes in process groups of their own, as Deployment.start makes them; no Airflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from outreach.dev.deploy import Deployment

# On SIGTERM: wait a moment (a task ending), then record whether the api-server still runs (a
# process that exited but was not reaped yet is a zombie, state Z: gone too), and exit.
_COMPONENT = """
import signal, sys, time
api_pid, out = int(sys.argv[1]), sys.argv[2]
def stop(*_):
    time.sleep(0.5)
    try:
        with open(f"/proc/{api_pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        alive = "gone" if state in ("Z", "X") else "alive"
    except FileNotFoundError:
        alive = "gone"
    open(out, "w").write(alive)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_the_api_server_outlives_the_components_that_report_through_it(tmp_path: Path):
    api = _spawn("import time; time.sleep(60)")
    seen = {name: tmp_path / f"{name}.seen" for name in ("scheduler", "worker-1")}
    others = {name: _spawn(_COMPONENT, str(api.pid), str(path)) for name, path in seen.items()}
    for p in others.values():
        assert p.stdout and p.stdout.readline() == "ready\n"
    dep = Deployment(home=tmp_path / "home", metadata_url="postgresql:///unused",
                     outreach_url="postgresql:///unused")
    dep.procs = {"api-server": api, **others}
    dep.stop(grace=20, api_grace=5)
    assert {name: path.read_text() for name, path in seen.items()} == {
        "scheduler": "alive", "worker-1": "alive"}
    assert all(p.poll() is not None for p in dep.procs.values())
    for p in dep.procs.values():
        assert p.stdout
        p.stdout.close()


# A scheduler whose executor ran a task in a session of its own (as Airflow's supervisor does) and
# dies at once on SIGTERM, leaving the task behind: the task records the SIGTERM it gets.
_TASK = """
import signal, sys, time
out = sys.argv[1]
def stop(*_):
    open(out, "w").write("stopped by SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""
_SCHEDULER = """
import subprocess, sys
task = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE,
                        text=True, start_new_session=True)
assert task.stdout.readline() == "ready\\n"
print(task.pid, flush=True)
import time; time.sleep(60)
"""


def test_a_task_left_behind_by_its_executor_is_stopped_too(tmp_path: Path):
    import psutil

    api = _spawn("import time; time.sleep(60)")
    out = tmp_path / "task.seen"
    scheduler = _spawn(_SCHEDULER, _TASK, str(out))
    assert scheduler.stdout
    task = psutil.Process(int(scheduler.stdout.readline()))
    dep = Deployment(home=tmp_path / "home", metadata_url="postgresql:///unused",
                     outreach_url="postgresql:///unused")
    dep.procs = {"api-server": api, "scheduler": scheduler}
    dep.stop(grace=20, api_grace=5, task_grace=5)
    assert out.read_text() == "stopped by SIGTERM"  # its chance to give its rows back
    assert not task.is_running() or task.status() == psutil.STATUS_ZOMBIE
    for p in dep.procs.values():
        assert p.stdout
        p.stdout.close()
