"""Run real Airflow locally for the demo and the tests: ``airflow dags test`` in a subprocess
with SQLite metadata under a project-local ``AIRFLOW_HOME`` (:func:`run_dag`), or several of them,
one after the other, in one Airflow process (:class:`DagTestSession`).

Nothing here is used by the DAGs themselves.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from outreach.paths import project_root


@dataclass(frozen=True)
class DagRunResult:
    """``dag_id``, final ``state`` (``success``/``failed``/``unknown``), exit ``returncode``,
    the path of the full ``log``, the run's ``run_id`` (``None``: the run was never created) and
    the SQLite ``metadata`` database it was recorded in (``None``: not SQLite)."""

    dag_id: str
    state: str
    returncode: int
    log: Path
    run_id: str | None = None
    metadata: Path | None = None

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.returncode == 0 and self.state == "success"


def airflow_env(airflow_home: Path, database_url: str, smtp_connections: dict[str, str],
                extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment for Airflow subprocesses.

    :param airflow_home: AIRFLOW_HOME (SQLite metadata lives there).
    :param database_url: the outreach database (``OUTREACH_DATABASE_URL``).
    :param smtp_connections: ``{conn_id: connection JSON}`` set as ``AIRFLOW_CONN_<ID>``.
    """
    root = project_root()
    airflow_home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "OUTREACH_HOME": str(root),
        "OUTREACH_DATABASE_URL": database_url,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "plugins"), env.get("PYTHONPATH")])),
    })
    for conn_id, value in smtp_connections.items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = value
    env.update(extra or {})
    return env


def airflow_cmd(*args: str) -> list[str]:
    """Return the command line for ``airflow ARGS`` with this interpreter."""
    return [sys.executable, "-m", "airflow", *args]


def ensure_metadata(env: dict[str, str]) -> None:
    """Create or migrate the SQLite metadata database (skipped when already done).

    :raises RuntimeError: ``airflow db migrate`` failed (its output is included).
    """
    home = Path(env["AIRFLOW_HOME"])
    marker = home / ".migrated"
    if marker.exists() and (home / "airflow.db").exists():
        return
    proc = subprocess.run(airflow_cmd("db", "migrate"), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    marker.write_text("ok\n")


def dags_test_args(env: dict[str, str], dag_id: str, conf: dict | None = None) -> list[str]:
    """Return the ``airflow dags test`` arguments for ``dag_id``: ``-f DAGS_FOLDER/<dag_id>.py``
    when the DAG has a file of that name (every DAG but the per-source imports), so Airflow parses
    and stores that one file, not all 26 (~3 s a run); ``-c`` with ``conf`` as JSON."""
    args = ["dags", "test", dag_id]
    own_file = Path(env.get("AIRFLOW__CORE__DAGS_FOLDER", "")) / f"{dag_id}.py"
    if env.get("AIRFLOW__CORE__DAGS_FOLDER") and own_file.is_file():
        args += ["-f", str(own_file)]
    if conf:
        args += ["-c", json.dumps(conf)]
    return args


# Airflow's own line as dag.test() creates the run: "creating dag run … run_id=<id>".
_RUN_ID = re.compile(r"creating dag run .*?\brun_id=(\S+)")
_STATE = re.compile(r"DagRun Finished: .*?state=(\w+)|dag_run_state=['\"]?(\w+)|"
                    r"Dag run .*? (?:finished|ended) .*?state[=:] ?['\"]?(\w+)", re.IGNORECASE)


def run_dag(env: dict[str, str], dag_id: str, log_path: Path, conf: dict | None = None,
            timeout: float = 900) -> DagRunResult:
    """Run one DAG as ``airflow dags test`` does, in a process of its own, and return its final
    state. The process is a one-run :class:`DagTestSession`: it ends with ``os._exit`` once the
    run is recorded, sparing Airflow's exit handlers (~2 s a run on 2 cores). A process that dies
    before the run ends (it could not start, or was killed) gives a failed result with its exit
    code; a timeout or an exception here (an interrupt) kills it at once.

    :param log_path: the run's whole Airflow output is written there: the process's start-up
        lines, then the run's, then how the process ended if it died first.
    :raises subprocess.TimeoutExpired: the run took longer than ``timeout`` seconds.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")  # this run's output only, whatever an earlier run left there
    session = DagTestSession(env)

    def whole_log(ending: str = "") -> str:
        output = session.startup_output + log_path.read_text() + ending
        log_path.write_text(output)
        return output

    try:
        result = session.run_dag(dag_id, log_path, conf, timeout)
    except RuntimeError:  # the process ended before the run did
        session.close()
        code = session.returncode or 1
        output = whole_log(f"\nthe Airflow process exited ({code}) before the run ended\n")
        return _result(dag_id, output, code, log_path, env)
    except BaseException:  # a timeout, an interrupt: the run must not go on sending
        session.close(kill=True)
        whole_log()
        raise
    session.close()
    whole_log()
    return result


def _result(dag_id: str, output: str, returncode: int, log_path: Path,
            env: dict[str, str]) -> DagRunResult:
    states = [next(g for g in m.groups() if g) for m in _STATE.finditer(output)]
    run_id = _RUN_ID.search(output)
    conn = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    return DagRunResult(dag_id, states[-1].lower() if states else "unknown", returncode, log_path,
                        run_id=run_id.group(1) if run_id else None,
                        metadata=Path(conn.removeprefix("sqlite:///"))
                        if conn.startswith("sqlite:///") else None)


_REPLY = "OUTREACH-DAG-TEST-SESSION "
# The session's process: Airflow's own CLI (`airflow dags test …`, what airflow.__main__ runs)
# once per request line on stdin, its stdout and stderr (file descriptors 1 and 2, so every
# handler and child writes there) redirected into that run's log; one reply line per request.
# A request may carry the run's environment: os.environ becomes it, but for the process's
# AIRFLOW_HOME and metadata database (Airflow bound them at start-up).
SESSION_SCRIPT = r"""
import json, os, sys, traceback
from airflow.cli import cli_parser
from airflow.configuration import write_default_airflow_configuration_if_needed
write_default_airflow_configuration_if_needed()
parser = cli_parser.get_parser()
reply = os.fdopen(os.dup(1), "w", buffering=1)
pinned = {k: os.environ[k] for k in PINNED if k in os.environ}
for line in sys.stdin:
    req = json.loads(line)
    if "env" in req:
        os.environ.clear()
        os.environ.update(req["env"])
        os.environ.update(pinned)
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1); os.dup2(log, 2)
    code = 0
    try:
        args = parser.parse_args(req["args"])
        args.func(args)
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)  # as the interpreter prints it ("DagRun failed")
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        for fd in (*saved, log):
            os.close(fd)
    reply.write(PREFIX + json.dumps({"returncode": code}) + "\n")
# stdin closed: every run is over and recorded. Airflow's exit handlers took 2-7 s here.
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
""".replace("PREFIX", repr(_REPLY)).replace("PINNED", repr(("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")))


def bound_at_start(env: dict[str, str]) -> dict[str, str]:
    """The part of ``env`` an Airflow process reads once at start-up: every ``AIRFLOW__*`` option (some
    become module constants on import), ``AIRFLOW_HOME`` and ``OUTREACH_FAILPOINTS``."""
    pinned = {"AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"}
    return {k: v for k, v in env.items() if k not in pinned
            and (k.startswith("AIRFLOW__") or k == "OUTREACH_FAILPOINTS")}


def popen_session(env: dict[str, str]) -> Any:
    """Start a session's process in a fresh interpreter: ``python -c`` :data:`SESSION_SCRIPT`
    with ``env``, stdin and stdout text pipes, stderr into stdout. What :data:`session_starter`
    is unless replaced."""
    return subprocess.Popen([sys.executable, "-c", SESSION_SCRIPT], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


session_starter: Callable[[dict[str, str]], Any] = popen_session
"""How a :class:`DagTestSession` starts its process: ``env`` in, a ``subprocess.Popen`` or an
object like one out (``stdin`` and ``stdout`` text streams, ``poll``, ``wait``, ``kill``) running
:data:`SESSION_SCRIPT` with ``env``. The tests put a fork of a warm Airflow process here
(``tests/support/airflowfork.py``); the demo keeps :func:`popen_session`."""


class DagTestSession:
    """Several ``airflow dags test`` runs in one Airflow process, each with its own log, sparing
    Airflow's start-up (~10 s on 2 busy cores) per run. A context manager.

    :param env: the process's environment (:func:`airflow_env`); a run may bring its own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        self._proc = session_starter(self.env)
        self._lines: queue.Queue[str] = queue.Queue()  # its output, "" once it ended
        self.startup_output = ""
        """What the process wrote outside any run (start-up warnings), in order."""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def __enter__(self) -> DagTestSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_dag(self, dag_id: str, log_path: Path, conf: dict | None = None,
                timeout: float = 900, env: dict[str, str] | None = None) -> DagRunResult:
        """Run one DAG like :func:`run_dag` (same arguments, same result).

        :param env: this run's environment; the process keeps its AIRFLOW_HOME and metadata database.
        :raises ValueError: ``env`` differs in what Airflow reads at start-up (:func:`bound_at_start`).
        :raises subprocess.TimeoutExpired: over ``timeout`` seconds (the process is killed).
        :raises RuntimeError: the session's process exited (its last output is included)."""
        code = self.run_command(dags_test_args(env or self.env, dag_id, conf), log_path, timeout, env)
        # The metadata database is the session's own, whatever the run's env says.
        return _result(dag_id, log_path.read_text(), code, log_path, self.env)

    def run_command(self, args: list[str], log_path: Path, timeout: float = 900,
                    env: dict[str, str] | None = None) -> int:
        """Run ``airflow ARGS`` (any command of Airflow's CLI, e.g. ``["dags", "reserialize"]``)
        in the session's process, its whole output into ``log_path``; return its exit code.
        Arguments, environment and errors as :meth:`run_dag`'s."""
        request: dict[str, object] = {"args": args, "log": str(log_path)}
        if env is not None:
            if bound_at_start(env) != bound_at_start(self.env):
                raise ValueError("the run's environment differs from the session's in what Airflow "
                                 "reads at start-up (bound_at_start): run it in its own process")
            request["env"] = env
        log_path.parent.mkdir(parents=True, exist_ok=True)
        assert self._proc.stdin
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # the process ended already: the loop below reads its last words, then raises
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close(kill=True)
                raise subprocess.TimeoutExpired(args, timeout) from None
            if not line:
                self.close(kill=True)
                raise RuntimeError(f"the Airflow session exited:\n{''.join(seen)[-3000:]}")
            if line.startswith(_REPLY):
                return int(json.loads(line[len(_REPLY):])["returncode"])
            seen.append(line)  # Airflow's output between runs (start-up warnings)
            self.startup_output += line

    @property
    def returncode(self) -> int | None:
        """The process's exit code, ``None`` while it runs."""
        return self._proc.poll()

    @property
    def alive(self) -> bool:
        """Whether the session's process still runs (a timeout or a crash ends it)."""
        return self._proc.poll() is None

    def close(self, kill: bool = False) -> None:
        """End the process (stdin closed, it exits; ``kill``: SIGKILL at once)."""
        if self._proc.poll() is None:
            if kill:
                self._proc.kill()
            else:
                assert self._proc.stdin
                try:
                    self._proc.stdin.close()
                except BrokenPipeError:
                    pass
                try:
                    self._proc.wait(60)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
        self._proc.wait()
        self._reader.join()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream and not stream.closed:
                stream.close()
