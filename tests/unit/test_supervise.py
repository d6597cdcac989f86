"""The supervisor (outreach.dev.supervise): a process that exits is started again after its
backoff while the others keep running; quick exits in a row wait longer, a healthy run starts
the backoff over; nothing is started after stop. Real child processes, an injected clock."""

from __future__ import annotations

import subprocess
import sys

from outreach.dev.supervise import Backoff, Supervisor


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_an_exited_process_comes_back_after_its_backoff_and_the_others_keep_running():
    procs = {"worker-1": _sleeper(), "scheduler": _sleeper()}
    spawned: list[str] = []
    said: list[str] = []

    def spawn(name: str) -> subprocess.Popen:
        spawned.append(name)
        return _sleeper()

    sup = Supervisor(procs, spawn, say=said.append, backoff=Backoff(first=2, factor=2, cap=5,
                                                                     healthy=30))
    try:
        assert sup.poll(now=0) == []
        scheduler = procs["scheduler"]
        procs["worker-1"].kill()
        procs["worker-1"].wait()
        assert sup.poll(now=1) == []            # noted; due at 1 + 2
        assert "worker-1 exited (-9) after 1 s; starting it again in 2 s" in said[0]
        assert sup.poll(now=2.9) == []
        assert sup.poll(now=3) == ["worker-1"]  # started again
        assert procs["worker-1"].poll() is None and procs["scheduler"] is scheduler
        assert scheduler.poll() is None         # never touched
        # A quick exit again: twice the wait; then capped.
        procs["worker-1"].kill()
        procs["worker-1"].wait()
        sup.poll(now=4)
        assert "in 4 s" in said[-1]
        assert sup.poll(now=7.9) == [] and sup.poll(now=8) == ["worker-1"]
        procs["worker-1"].kill()
        procs["worker-1"].wait()
        sup.poll(now=9)
        assert "in 5 s" in said[-1]             # the cap
        sup.poll(now=14)
        # A run of 30 s or more before the exit starts the backoff over.
        procs["worker-1"].kill()
        procs["worker-1"].wait()
        sup.poll(now=50)
        assert "after 36 s; starting it again in 2 s" in said[-1]
        sup.stop()                               # nothing comes back after stop
        assert sup.poll(now=100) == []
        assert spawned == ["worker-1"] * 3 and sup.restarts("worker-1") == 3
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
