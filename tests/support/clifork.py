"""``outreach`` CLI calls from tests, each a real process forked from a warm interpreter.

A ``python -m outreach.cli`` process spends most of its CPU importing (``airflow.sdk`` alone,
for the SMTP and IMAP connections: ~3 CPU-seconds on a slow 2-core machine, against well under
one for most commands' own work); the suite made ~250 such calls, ~590 of its ~3,250
CPU-seconds on 2026-12-07. Here one server process per pytest worker imports the CLI and Airflow
once, then forks a child per call: the child gets the call's stdin, stdout and stderr, working
folder, environment and ``sys.argv``, runs ``outreach.cli`` as ``python -m`` does
(``runpy``, as ``__main__``) and ends as the interpreter ends (``SystemExit``, atexit
handlers, death by an uncaught SIGINT), so its exit code, output and signals are a process's.

What a fork cannot give is what the interpreter read at import: the call's ``AIRFLOW_HOME`` and
``AIRFLOW__*`` options (:func:`_bound`) must equal the server's, or the call runs in a fresh
interpreter as before; so does every call with ``OUTREACH_TEST_CLI_FORK=off``. The one outreach
module that reads the environment on import, :mod:`outreach.failpoints`, is imported again in
the call's process. Tests that signal or time the process itself start it with
``subprocess`` (:func:`support.flow.outreach_cmd`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from outreach.dev.localairflow import bound_at_start

_BASE_ENV = dict(os.environ)
"""The environment the server starts with: the worker's at import (collection), before any test
patched it."""

_SERVER = r"""
import gc, importlib, json, os, pkgutil, runpy, selectors, signal, socket, sys
import outreach
# Every module a command may import on its way (not outreach.cli.__main__: it runs the CLI), and
# Airflow's SMTP hook: imported here once, not in each call.
for module in pkgutil.walk_packages(outreach.__path__, "outreach."):
    if not module.name.endswith(".__main__"):
        importlib.import_module(module.name)
import airflow.providers.smtp.hooks.smtp  # noqa: F401
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1]); listener.listen(64)
wake_r, wake_w = os.pipe(); os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w); signal.signal(signal.SIGCHLD, lambda *a: None)
sel = selectors.DefaultSelector()
sel.register(listener, selectors.EVENT_READ); sel.register(0, selectors.EVENT_READ)
sel.register(wake_r, selectors.EVENT_READ)
waiting = {}  # pid -> the connection that asked for it
sys.stdout.flush(); sys.stderr.flush(); gc.collect(); gc.freeze()
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.fileobj == 0:
            if not os.read(0, 1024):  # the pytest worker is gone
                os._exit(0)
        elif key.fileobj == wake_r:
            os.read(wake_r, 4096)
            while waiting:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    break
                conn = waiting.pop(pid)
                conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                conn.close()
        else:
            conn, _ = listener.accept()
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            req = json.loads(msg)
            pid = os.fork()
            if pid == 0:  # the call's process: it never returns to this loop
                signal.set_wakeup_fd(-1); signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sel.close(); listener.close(); conn.close(); os.close(wake_r); os.close(wake_w)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target); os.close(fd)
                os.chdir(req["cwd"])
                os.environ.clear(); os.environ.update(req["env"])
                importlib.reload(sys.modules["outreach.failpoints"])  # it reads OUTREACH_FAILPOINTS on import
                sys.argv = ["outreach", *req["args"]]
                runpy.run_module("outreach.cli", run_name="__main__", alter_sys=True)
                sys.exit(0)
            for fd in fds:
                os.close(fd)
            waiting[pid] = conn
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
"""


class _Server:
    """This worker's fork server, started at its first call."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="outreach-clifork-"))
        self.path = str(self.folder / "sock")
        self.log = open(self.folder / "server.log", "w+b")  # open for the server's life
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, self.path], env=_BASE_ENV,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        assert self.proc.stdout
        if self.proc.stdout.readline() != b"ready\n":
            self.log.seek(0)
            raise RuntimeError(f"the CLI fork server did not start: {self.log.read().decode()[-3000:]}")
        self.proc.stdout.close()


_server: _Server | None = None


def _bound(env: dict[str, str]) -> dict[str, str | None]:
    """What of ``env`` an interpreter reads once, on import (:func:`bound_at_start`), but for
    ``OUTREACH_FAILPOINTS``: the call's process imports :mod:`outreach.failpoints` again."""
    bound = {k: v for k, v in bound_at_start(env).items() if k != "OUTREACH_FAILPOINTS"}
    return bound | {"AIRFLOW_HOME": env.get("AIRFLOW_HOME")}


def _forkable(env: dict[str, str]) -> bool:
    """Whether a call with ``env`` may be forked from the server (started here when it is not
    running)."""
    global _server
    if os.environ.get("OUTREACH_TEST_CLI_FORK", "on") == "off" or _bound(env) != _bound(_BASE_ENV):
        return False
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    return True


def run(args: list[str] | tuple[str, ...], *, env: dict[str, str], cwd: str | Path | None = None,
        timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``outreach ARGS`` as ``subprocess.run([python, "-m", "outreach.cli", *args],
    capture_output=True, text=True)`` would: the completed process (``returncode`` negative for
    death by a signal). Forked from this worker's server when the environment allows
    (module docstring), else a fresh interpreter.

    :raises subprocess.TimeoutExpired: the process ran ``timeout`` seconds (it is SIGKILLed)."""
    cmd = [sys.executable, "-m", "outreach.cli", *args]
    if not _forkable(env):
        return subprocess.run(cmd, env=env, cwd=cwd, input=input, capture_output=True, text=True,
                              timeout=timeout)
    assert _server is not None
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err, socket.socket(socket.AF_UNIX) as s:
        stdin.write((input or "").encode())
        stdin.flush()
        stdin.seek(0)
        s.connect(_server.path)
        req = {"args": list(args), "env": env, "cwd": str(cwd or os.getcwd())}
        socket.send_fds(s, [json.dumps(req).encode()], [stdin.fileno(), out.fileno(), err.fileno()])
        pid = _reply(s)["pid"]
        s.settimeout(timeout)
        try:
            code = _reply(s)["returncode"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            s.settimeout(None)
            _reply(s)
            raise subprocess.TimeoutExpired(cmd, timeout, _read(out), _read(err)) from None
        return subprocess.CompletedProcess(cmd, code, _text(_read(out)), _text(_read(err)))


def _read(f) -> bytes:
    f.seek(0)
    return f.read()


def _reply(s: socket.socket) -> dict:
    """The server's next one-line JSON reply on ``s`` (TimeoutError past the socket's timeout)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("the CLI fork server died during the call (its log: "
                               f"{_server.folder if _server else '?'}/server.log)")
        data += chunk
    return json.loads(data)


def _text(data: bytes) -> str:
    """Decoded as ``subprocess.run(text=True)`` decodes captured output (locale encoding,
    universal newlines)."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
