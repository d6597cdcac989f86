"""``outreach`` CLI calls from tests, each a real process forked from a warm interpreter.

A ``python -m outreach.cli`` process spends most of its CPU importing (``airflow.sdk`` alone,
for the SMTP and IMAP connections: ~3 CPU-seconds on a slow 2-core machine, against well under
one for most commands' own work); the suite made ~250 such calls, ~590 of its ~3,250
CPU-seconds on 2026-12-07. Here one server process per pytest worker imports the CLI and Airflow
once, then forks a child per call: the child gets the call's stdin, stdout and stderr, working
folder, environment and ``sys.argv``, runs ``outreach.cli`` as ``python -m`` does
(``runpy``, as ``__main__``) and ends as the interpreter ends (``SystemExit``, atexit
handlers, death by an uncaught SIGINT), so its exit code, output and signals are a process's.

What a fork cannot give is what the interpreter read at import: the call's ``AIRFLOW_HOME``,
``AIRFLOW__*`` options and the like (:func:`read_on_import`) must equal the server's, or the call runs in a fresh
interpreter as before; so does every call with ``OUTREACH_TEST_CLI_FORK=off``. The one outreach
module that reads the environment on import, :mod:`outreach.failpoints`, is imported again in
the call's process. :func:`start` returns at once with the process's pid, for the tests that
kill or signal senders at moments of their own (the chaos tests); tests that time the process
itself or read its output while it runs start it with ``subprocess``
(:func:`support.flow.outreach_cmd`).

Logging is the one difference left: the CLI puts its own lines on stderr whichever command runs
(``outreach.cli._configure_logging``), but another library's warning goes to stdout in
Airflow's format in a fresh process whose command imported Airflow, to stderr in a forked one."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_BASE_ENV = dict(os.environ)
"""The environment the server starts with: the worker's at import (collection), before any test
patched it."""

_LOOP = r"""
import ctypes, gc, importlib, json, os, selectors, shutil, signal, socket, sys
server = os.getpid()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1]); listener.listen(64)
wake_r, wake_w = os.pipe(); os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w); signal.signal(signal.SIGCHLD, lambda *a: None)
# Its owner: the pytest worker on its stdin, or (a second argument) a process by its pid, the
# pytest run's controller for a server every worker shares.
owner = int(sys.argv[2]) if len(sys.argv) > 2 else None
watched = os.pidfd_open(owner) if owner else 0
sel = selectors.DefaultSelector()
sel.register(listener, selectors.EVENT_READ); sel.register(watched, selectors.EVENT_READ)
sel.register(wake_r, selectors.EVENT_READ)
waiting = {}  # pid -> the connection that asked for it

def reply(conn, **fields):
    try:
        conn.sendall(json.dumps(fields).encode() + b"\n")
    except OSError:  # the caller is gone (it kills what it started): nobody to tell
        pass

sys.stdout.flush(); sys.stderr.flush(); gc.collect(); gc.freeze()
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.fileobj == watched:
            if owner or not os.read(0, 1024):  # the owner is gone: so are its calls
                for pid in waiting:
                    os.kill(pid, signal.SIGKILL)
                shutil.rmtree(os.path.dirname(sys.argv[1]), ignore_errors=True)
                os._exit(0)
        elif key.fileobj == wake_r:
            os.read(wake_r, 4096)
            while waiting:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    break
                conn = waiting.pop(pid)
                reply(conn, returncode=os.waitstatus_to_exitcode(status))
                conn.close()
        else:
            conn, _ = listener.accept()
            try:
                _, fds, _, _ = socket.recv_fds(conn, 16, 4)
                with os.fdopen(fds.pop(), "rb") as f:  # the request, a file of its own: any size
                    req = json.load(f)
            except (OSError, ValueError) as exc:
                reply(conn, error=repr(exc))
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:  # the call's process: it never returns to this loop
                # SIGKILLed when the server ends (PR_SET_PDEATHSIG), whoever asked for it.
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)
                if os.getppid() != server:  # it ended before the prctl
                    os._exit(1)
                signal.set_wakeup_fd(-1); signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sel.close(); listener.close(); os.close(wake_r); os.close(wake_w)
                if owner:
                    os.close(watched)
                for other in (conn, *waiting.values()):
                    other.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target); os.close(fd)
                os.chdir(req["cwd"])
                os.environ.clear(); os.environ.update(req["env"])
                importlib.reload(sys.modules["outreach.failpoints"])  # it reads OUTREACH_FAILPOINTS on import
                child_main(req)
                sys.exit(0)
            for fd in fds:
                os.close(fd)
            waiting[pid] = conn
            reply(conn, pid=pid)
"""
"""A fork server's loop, after its prelude (which defines ``child_main(req)``): one child per
connection, given the fds sent with it as 0, 1, 2 (a last one holds the JSON request: ``cwd``,
``env`` and what ``child_main`` reads), its pid and then its exit code sent back on the
connection; every child SIGKILLed and the server gone once its owner is (its stdin, the pytest
worker, closed; or the process its second argument names ended)."""

_CLI_PRELUDE = r"""
import importlib, pkgutil, runpy, sys
import outreach
# Every module a command may import on its way (not outreach.cli.__main__: it runs the CLI), and
# Airflow's SMTP hook: imported here once, not in each call.
for module in pkgutil.walk_packages(outreach.__path__, "outreach."):
    if not module.name.endswith(".__main__"):
        importlib.import_module(module.name)
import airflow.providers.smtp.hooks.smtp  # noqa: F401

def child_main(req):
    sys.argv = ["outreach", *req["args"]]
    runpy.run_module("outreach.cli", run_name="__main__", alter_sys=True)
"""


class ForkServer:
    """A warm interpreter that forks a child per call: ``prelude`` (Python source: the imports to
    do once, and ``child_main(req)``, what a child runs) then :data:`_LOOP`, started with ``env``
    in ``folder`` (default: a new temporary one; the server removes it as it ends). ``what`` names
    it in errors. Ends with the pytest worker, or with the process ``owner`` names
    (:meth:`shared`: one server for the whole run).

    :raises RuntimeError: it did not start (its log's last lines are included)."""

    proc: subprocess.Popen | None
    """The server's process when this pytest process started it, else None."""

    def __init__(self, prelude: str, env: dict[str, str], what: str, *, folder: Path | None = None,
                 owner: int | None = None) -> None:
        folder = folder or Path(tempfile.mkdtemp(prefix="outreach-fork-"))
        folder.mkdir(exist_ok=True)
        self.path, self.what, self.log = str(folder / "sock"), what, folder / "server.log"
        with open(self.log, "w+b") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", prelude + _LOOP, self.path, *([str(owner)] if owner else [])],
                env=env, stdin=subprocess.DEVNULL if owner else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log)
            assert self.proc.stdout
            with self.proc.stdout:
                # What the prelude printed (Airflow logs to stdout) goes to the log.
                while (line := self.proc.stdout.readline()) not in (b"ready\n", b""):
                    log.write(line)
                if not line:
                    log.seek(0)
                    raise RuntimeError(f"the {what} did not start: {log.read().decode()[-3000:]}")
        self.pid = self.proc.pid
        (folder / "pid").write_text(str(self.pid))

    @classmethod
    def shared(cls, name: str, prelude: str, env: dict[str, str], what: str) -> ForkServer:
        """The server ``name`` of this pytest run: the one a worker started already, while it
        runs, else one started here (under a file lock) that ends with the run's controller
        (``pytest -n 0``: this process), in ``run_folder()/name``."""
        from filelock import FileLock

        from support.once import run_folder

        folder = run_folder() / name
        with FileLock(str(run_folder() / f"{name}.lock")):
            with contextlib.suppress(OSError, ValueError):
                server = cls.__new__(cls)
                server.path, server.what, server.log = str(folder / "sock"), what, folder / "server.log"
                server.proc, server.pid = None, int((folder / "pid").read_text())
                if server.alive():
                    return server
            shutil.rmtree(folder, ignore_errors=True)
            owner = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            return cls(prelude, env, what, folder=folder, owner=owner)

    def alive(self) -> bool:
        """Whether the server still runs."""
        import psutil

        if self.proc is not None:
            return self.proc.poll() is None
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def connect(self, fds: list[int], request: dict) -> tuple[socket.socket, _Replies, int]:
        """Ask for a child with ``fds`` as its 0, 1, 2 and ``request`` (``cwd``, ``env``…);
        return the call's socket, its replies and the child's pid."""
        s = socket.socket(socket.AF_UNIX)
        with tempfile.TemporaryFile() as f:
            f.write(json.dumps(request).encode())
            f.flush()
            f.seek(0)
            s.connect(self.path)
            socket.send_fds(s, [b"call"], [*fds, f.fileno()])
        replies = _Replies(s, self)
        return s, replies, replies.next()["pid"]


_server: ForkServer | None = None
_starting = threading.Lock()

_READ_ON_IMPORT = ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "TZ", "LANG")
_READ_ON_IMPORT_PREFIXES = ("AIRFLOW__", "PYTHON", "LC_")


def read_on_import(env: dict[str, str]) -> dict[str, str]:
    """What of ``env`` an interpreter may read once, on import: Airflow's home, configuration file
    and options, the interpreter's own variables, the time zone and locale. Not
    ``OUTREACH_FAILPOINTS``: the call's process imports :mod:`outreach.failpoints` again."""
    return {k: v for k, v in env.items()
            if k in _READ_ON_IMPORT or k.startswith(_READ_ON_IMPORT_PREFIXES)}


def _forkable(env: dict[str, str]) -> bool:
    """Whether a call with ``env`` may be forked from the server (started here when it is not
    running)."""
    global _server
    if os.environ.get("OUTREACH_TEST_CLI_FORK", "on") == "off" or read_on_import(env) != read_on_import(_BASE_ENV):
        return False
    with _starting:
        if _server is None or not _server.alive():
            _server = ForkServer(_CLI_PRELUDE, _BASE_ENV, "CLI fork server")
    return True


def run(args: list[str] | tuple[str, ...], *, env: dict[str, str], cwd: str | Path | None = None,
        timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``outreach ARGS`` as ``subprocess.run([python, "-m", "outreach.cli", *args],
    capture_output=True, text=True)`` would: the completed process (``returncode`` negative for
    death by a signal). Forked from this worker's server when the environment allows
    (module docstring), else a fresh interpreter. Like ``subprocess.run``, an exception while it
    waits (a timeout, an interrupt) kills the process.

    :raises subprocess.TimeoutExpired: the process ran ``timeout`` seconds (it is SIGKILLed).
    :raises FileNotFoundError: ``cwd`` is not a folder."""
    if not _forkable(env):
        return subprocess.run([sys.executable, "-m", "outreach.cli", *args], env=env, cwd=cwd,
                              input=input, capture_output=True, text=True, timeout=timeout)
    with _call(args, env, cwd, input, merge_stderr=False) as call:
        try:
            out, err = call.communicate(timeout=timeout)
        except BaseException:
            call.kill()
            call.wait(30)  # the server reaps it
            raise
        return subprocess.CompletedProcess(call.args, call.returncode, out, err)


def start(args: list[str] | tuple[str, ...], *, env: dict[str, str], cwd: str | Path | None = None,
          merge_stderr: bool = False) -> Call | subprocess.Popen:
    """Start ``outreach ARGS`` and return at once, as ``subprocess.Popen(..., stdout=PIPE,
    stderr=PIPE or STDOUT, text=True)`` would: a :class:`Call` forked from this worker's server
    when the environment allows, else that Popen. Both have ``args``, ``pid``, ``returncode``,
    ``poll()``, ``wait(timeout)``, ``communicate(timeout)`` (text; ``stderr`` None when
    ``merge_stderr``), ``send_signal(sig)``, ``kill()`` and ``with``; a signal reaches the
    process itself (for the tests that kill senders at moments of their own).

    :raises FileNotFoundError: ``cwd`` is not a folder."""
    if not _forkable(env):
        return subprocess.Popen([sys.executable, "-m", "outreach.cli", *args], env=env, cwd=cwd,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True)
    return _call(args, env, cwd, None, merge_stderr)


def _call(args, env: dict[str, str], cwd: str | Path | None, input: str | None,
          merge_stderr: bool) -> Call:
    """Fork the call from the server (:func:`_forkable` said yes and started it)."""
    assert _server is not None
    folder = str(cwd or os.getcwd())
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "No such file or directory", folder)
    return Call([sys.executable, "-m", "outreach.cli", *args], args, env, folder, input, merge_stderr)


class Forked:
    """A process forked by a :class:`ForkServer` (``fds``: its 0, 1, 2; ``request``: ``cwd``,
    ``env``…), seen as a ``subprocess.Popen`` of ``cmd``: ``pid``, ``returncode``, ``poll``,
    ``wait``, ``send_signal``, ``kill``."""

    def __init__(self, server: ForkServer, cmd: list[str], fds: list[int], request: dict) -> None:
        self.args, self.returncode = cmd, None
        self.s, self._replies, self.pid = server.connect(fds, request)

    def poll(self) -> int | None:
        """The exit code when the process has ended (the server reaped it), else None."""
        if self.returncode is None:
            self.s.setblocking(False)
            try:
                self.returncode = self._replies.next()["returncode"]
            except (BlockingIOError, InterruptedError):
                pass
            except ServerGone:
                self.returncode = self._killed_with_the_server()
            finally:
                self.s.setblocking(True)
            if self.returncode is not None:
                self.s.close()  # nothing more comes on it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; return the exit code (negative: the signal that ended it).

        :raises subprocess.TimeoutExpired: still running after ``timeout`` seconds (not killed)."""
        if self.returncode is None:
            self.s.settimeout(timeout)
            try:
                self.returncode = self._replies.next()["returncode"]
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            except ServerGone:
                self.returncode = self._killed_with_the_server()
            finally:
                self.s.settimeout(None)
            self.s.close()
        return self.returncode

    def _killed_with_the_server(self) -> int:
        """The server ended without telling this process's end: the kernel SIGKILLed it with
        the server (PR_SET_PDEATHSIG); once it is gone, that is its exit code."""
        import psutil

        with contextlib.suppress(psutil.Error):
            psutil.Process(self.pid).wait(30)
        return -signal.SIGKILL

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended as the signal went
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Call(Forked):
    """One forked ``outreach`` process (:func:`start`), seen as a ``subprocess.Popen``."""

    def __init__(self, cmd: list[str], args, env: dict[str, str], folder: str, input: str | None,
                 merge_stderr: bool) -> None:
        self.merged = merge_stderr
        self.out = tempfile.TemporaryFile()
        self.err = self.out if merge_stderr else tempfile.TemporaryFile()
        assert _server is not None
        with tempfile.TemporaryFile() as stdin:
            stdin.write((input or "").encode())
            stdin.flush()
            stdin.seek(0)
            super().__init__(_server, cmd, [stdin.fileno(), self.out.fileno(), self.err.fileno()],
                             {"args": list(args), "env": env, "cwd": folder})

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """Wait for the end (:meth:`wait`); return its stdout and stderr as text (and close the
        call's socket and files, as ``communicate`` closes a Popen's pipes)."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            exc.output, exc.stderr = _read(self.out), None if self.merged else _read(self.err)
            raise
        out, err = _text(_read(self.out)), None if self.merged else _text(_read(self.err))
        self._close()
        return out, err

    def __enter__(self) -> Call:
        return self

    def __exit__(self, *exc) -> None:
        """As Popen's: wait for the end (a caller that leaves early killed it first)."""
        try:
            self.wait(30 if exc[0] is not None else None)
        finally:
            self._close()

    def _close(self) -> None:
        self.s.close()
        self.out.close()
        self.err.close()


class ServerGone(RuntimeError):
    """The fork server closed a call's connection without a reply: it ended."""


class _Replies:
    """The server's one-line JSON replies on one call's socket, in order."""

    def __init__(self, s: socket.socket, server: ForkServer) -> None:
        self.s, self.data, self.server = s, b"", server

    def next(self) -> dict:
        """The next reply (TimeoutError past the socket's timeout; :class:`ServerGone` when the
        server ended the connection; RuntimeError when it refused the request)."""
        while b"\n" not in self.data:
            chunk = self.s.recv(4096)
            if not chunk:
                raise ServerGone(f"the {self.server.what} ended the call (its log: {self.server.log})")
            self.data += chunk
        line, self.data = self.data.split(b"\n", 1)
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the {self.server.what} refused the call: {reply['error']}")
        return reply


def _read(f) -> bytes:
    f.seek(0)
    return f.read()


def _text(data: bytes) -> str:
    """Decoded as ``subprocess.run(text=True)`` decodes captured output (locale encoding,
    universal newlines)."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
