"""Supervision of a process deployment: a process that exits is started again with exponential
backoff while the others keep running (like systemd's ``Restart=always``).

A killed worker or a dag-processor exiting on a database restart used to stop ``make airflow``
for good. Restarts are safe by the database's rules (fresh claims, the reaper's short release),
not by anything here."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    """When to start an exited process again: ``first`` seconds after its first exit, then
    ``factor`` times longer after each exit in a row, at most ``cap`` seconds; a process that
    ran ``healthy`` seconds or longer before it exited starts over at ``first``."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0
    healthy: float = 60.0

    def delay(self, failures: int) -> float:
        """Return seconds to wait before the restart after ``failures`` (≥ 1) quick exits."""
        return min(self.cap, self.first * self.factor ** max(0, failures - 1))


@dataclass
class _Watch:
    started: float
    failures: int = 0
    due: float | None = None  # monotonic moment of the next start, while it is down
    restarts: int = 0


@dataclass
class Supervisor:
    """Keep every process of ``procs`` running.

    :param procs: name → process, the deployment's own dict (a restart replaces the entry).
    :param spawn: starts the process ``name`` again and returns it (``Deployment.respawn``).
    :param say: where the one-line notices go (an exit with its code and log, a restart).
    :param backoff: see :class:`Backoff`."""

    procs: dict[str, subprocess.Popen]
    spawn: Callable[[str], subprocess.Popen]
    say: Callable[[str], None] = print
    backoff: Backoff = field(default_factory=Backoff)
    logs: Mapping[str, str] = field(default_factory=dict)
    _watch: dict[str, _Watch] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def poll(self, now: float | None = None) -> list[str]:
        """Look once: note every process that exited (its restart is due after the backoff) and
        start those whose restart is due. Return the names started again by this call.

        :param now: ``time.monotonic()`` (injectable for tests).
        """
        now = time.monotonic() if now is None else now
        started: list[str] = []
        for name, proc in list(self.procs.items()):
            w = self._watch.setdefault(name, _Watch(started=now))
            if w.due is None:
                code = proc.poll()
                if code is None:
                    continue
                ran = now - w.started
                w.failures = 1 if ran >= self.backoff.healthy else w.failures + 1
                wait = self.backoff.delay(w.failures)
                w.due = now + wait
                where = f"; see {self.logs[name]}" if name in self.logs else ""
                self.say(f"airflow {name} exited ({code}) after {ran:.0f} s; starting it again "
                         f"in {wait:.0f} s, the others keep running{where}")
            if w.due is not None and now >= w.due and not self._stop.is_set():
                self.procs[name] = self.spawn(name)
                w.started, w.due = now, None
                w.restarts += 1
                started.append(name)
                self.say(f"airflow {name} started again (restart {w.restarts}, pid "
                         f"{self.procs[name].pid})")
        return started

    def restarts(self, name: str) -> int:
        """How many times ``name`` was started again."""
        return self._watch[name].restarts if name in self._watch else 0

    def start_thread(self, interval: float = 1.0) -> Supervisor:
        """Poll every ``interval`` seconds in a daemon thread until :meth:`stop`; return self."""
        def loop() -> None:
            while not self._stop.wait(interval):
                self.poll()

        self._thread = threading.Thread(target=loop, name="outreach-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop restarting (before the deployment is stopped, so nothing comes back)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
