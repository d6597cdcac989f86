"""The DAG tests' Airflow processes (:class:`outreach.dev.localairflow.DagTestSession`: every
``run_dag``, :func:`support.airflowhome.dag_session`, the worker's shared process) forked from a
warm Airflow process instead of started afresh.

A fresh ``dags test`` process spends ~7 CPU-seconds on a fast 2-core machine before its first
task runs: importing Airflow and the CLI (~1.8), building the in-process execution API the tasks
talk to (~1.3) and, on its first request, Cadwyn's versioned routes (~3.7). The suite started
~16 such processes, ~110 of its ~1,330 CPU-seconds on 2026-12-07. Here one server for the whole
run (shared by the pytest-xdist workers, ended with the run's controller) does all of that once
(:data:`_PRELUDE`) and forks a child per session: the child gets the session's pipes as stdin,
stdout and stderr, its environment, and runs
:data:`~outreach.dev.localairflow.SESSION_SCRIPT` as a fresh interpreter would.

What a fork cannot give is what Airflow read on import. The child points Airflow at its own
``AIRFLOW_HOME`` (its ``airflow.cfg`` written there, as a fresh process writes it), its own
metadata database (the ORM configured again) and DAG folder (:data:`_READ_AGAIN`); every other
option Airflow reads at start-up (:func:`~outreach.dev.localairflow.bound_at_start`:
``AIRFLOW__*``, ``OUTREACH_FAILPOINTS``) and what the interpreter reads on import
(:func:`support.clifork.read_on_import`) must equal the server's, or the session starts in a fresh interpreter as before
(:func:`~outreach.dev.localairflow.popen_session`); so does every session with
``OUTREACH_TEST_AIRFLOW_FORK=off``."""

from __future__ import annotations

import os
import threading

from outreach.dev.localairflow import airflow_env, bound_at_start, popen_session
from support.clifork import Forked, ForkServer, read_on_import
from support.once import run_folder

_PRELUDE = r"""
import importlib, os, pkgutil, sys, threading
import outreach
# The outreach modules the DAG files import (outreach.failpoints is imported again per child).
for module in pkgutil.walk_packages(outreach.__path__, "outreach."):
    if not module.name.endswith(".__main__"):
        importlib.import_module(module.name)
from airflow.cli import cli_parser
# Not write_default_airflow_configuration_if_needed(): it fixes a Fernet key and a JWT secret in
# the defaults; each child writes its own airflow.cfg with its own, as a fresh process does.
cli_parser.get_parser()
import airflow.cli.commands.dag_command  # what `dags test` runs, imported on first use
import airflow.sdk.execution_time.task_runner  # noqa: F401
from airflow.sdk.execution_time.supervisor import in_process_api_server
# The execution API `dags test` runs its tasks against, in this process; Cadwyn builds its
# versioned routes on the first request it serves: here, once (no loop thread is started yet).
app = in_process_api_server().app
if not app._cadwyn_initialized:
    app._cadwyn_initialize()
assert threading.active_count() == 1, f"a thread would not survive the fork: {threading.enumerate()}"
from outreach.dev.localairflow import SESSION_SCRIPT

def child_main(req):
    from airflow import configuration, settings
    home = os.environ["AIRFLOW_HOME"]
    configuration.AIRFLOW_HOME = settings.AIRFLOW_HOME = home
    configuration.AIRFLOW_CONFIG = configuration.get_airflow_config(home)
    # The defaults that name the home ({AIRFLOW_HOME}/logs…) were expanded with the server's.
    conf = configuration.conf
    conf._default_values = configuration.create_default_config_parser(conf._configuration_description)
    conf.invalidate_cache()
    sys.modules["airflow.sdk.configuration"].__dict__.pop("conf", None)  # made again when asked
    settings.configure_vars()  # the metadata database and DAG folder, from this child's environment
    settings.prepare_syspath_for_config_and_plugins()
    settings.reconfigure_orm()
    exec(compile(SESSION_SCRIPT, "<dag test session>", "exec"), {"__name__": "__main__"})
"""

_lock = threading.Lock()
_server: ForkServer | None = None
_standard: dict[str, str] | None = None


_READ_AGAIN = ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__DAGS_FOLDER")
"""What the child reads again from its environment: its home, metadata database and DAG folder
(``settings.configure_vars``; the DAG bundle takes ``settings.DAGS_FOLDER`` when it is made)."""


def _forkable(env: dict[str, str], standard: dict[str, str]) -> bool:
    def bound(e: dict[str, str]) -> dict[str, str]:
        read = {**read_on_import(e), **bound_at_start(e)}
        return {k: v for k, v in read.items() if k not in _READ_AGAIN}

    return os.environ.get("OUTREACH_TEST_AIRFLOW_FORK", "on") != "off" and bound(env) == bound(standard)


def starter(settings_env: dict[str, str]):
    """A :data:`outreach.dev.localairflow.session_starter` forking from the run's server (one
    for every pytest-xdist worker: :meth:`ForkServer.shared`), whose environment is the DAG
    tests' standard one (:func:`airflow_env` with ``settings_env``, in a home of its own under
    the run's folder); started at the first session that may fork."""

    def start(env: dict[str, str]):
        global _server, _standard
        with _lock:
            if _standard is None:
                _standard = airflow_env(run_folder() / "airflowfork-home", "unused", {}, settings_env)
            if not _forkable(env, _standard):
                return popen_session(env)
            if _server is None or not _server.alive():
                _server = ForkServer.shared("airflowfork", _PRELUDE, _standard, "Airflow fork server")
            server = _server
        return ForkedSession(server, env)

    return start


class ForkedSession(Forked):
    """A session's process forked from ``server``, seen as the ``subprocess.Popen`` that
    :func:`~outreach.dev.localairflow.popen_session` returns: ``stdin`` and ``stdout`` text
    pipes (stderr into stdout), ``poll``, ``wait``, ``kill``."""

    def __init__(self, server: ForkServer, env: dict[str, str]) -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            super().__init__(server, ["airflow dags test session"], [in_r, out_w, out_w],
                             {"env": env, "cwd": os.getcwd()})
        except BaseException:
            os.close(in_w)
            os.close(out_r)
            raise
        finally:
            os.close(in_r)
            os.close(out_w)
        self.stdin = os.fdopen(in_w, "w")
        self.stdout = os.fdopen(out_r)
