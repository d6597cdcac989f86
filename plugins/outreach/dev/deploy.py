"""Airflow deployments as processes on this machine: api-server, scheduler, dag-processor and
triggerer, with the LocalExecutor or the CeleryExecutor and N workers; metadata in PostgreSQL.

``make airflow [EXECUTOR=celery WORKERS=N]`` runs them; Celery never uses the embedded server.
:data:`SERVICES`, :data:`WORKER`, :func:`init_commands` and :func:`shared_settings` are the one
definition of what runs (``tests/acceptance/test_compose.py`` holds ``docker-compose.yaml`` to
it). How to run it: docs/howto/celery-deployment.md, docs/howto/celery-scale-out.md."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from outreach.airflow.roles import ADMIN_PASSWORD_VAR, ADMIN_USER
from outreach.dev.devsmtp import free_port
from outreach.paths import project_root
from outreach.settings import DatabaseSettings
from outreach.sizing import sessions_per_task

SERVICES: dict[str, tuple[str, ...]] = {
    "airflow-apiserver": ("api-server",),
    "airflow-scheduler": ("scheduler",),
    "airflow-dag-processor": ("dag-processor",),
    "airflow-triggerer": ("triggerer",),
}
"""Compose service name → ``airflow`` sub-command, for every deployment."""
WORKER: tuple[str, tuple[str, ...]] = ("airflow-worker", ("celery", "worker"))
"""The CeleryExecutor's worker service and its ``airflow`` sub-command (one process per worker)."""
EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
POOL_SLOTS_VAR = "OUTREACH_SMTP_POOL_SLOTS"
SESSIONS_VAR = "OUTREACH_SEND_SESSIONS_PER_TASK"
DEFAULT_POOL_SLOTS = 4
CELERY_OPERATION_TIMEOUT = "10"
"""Seconds the scheduler gives one publish of a task to the Celery broker
(``[celery] operation_timeout``; Airflow's default is 1). A publish that times out is tried 3
more times, then the task instance is failed before it ever started and waits ``retry_delay``
(300 s) for its next try: on a loaded host (the scheduler's first publish also connects to Redis)
1 s was seen to cost a send run 5 minutes (bench/results/scaleout-2026-12-02.md, Celery ×1:
"waits 351.3 s"). 10 s still bounds a scheduler loop when the broker hangs."""


def pool_slots(default: int = DEFAULT_POOL_SLOTS) -> int:
    """Return ``OUTREACH_SMTP_POOL_SLOTS`` (else ``default``, :mod:`outreach.sizing`'s pool): SMTP
    sessions of the send tasks across the deployment.

    :raises outreach.settings.SettingsError: not a whole number ≥ 1."""
    from outreach.settings import SettingsError

    raw = os.environ.get(POOL_SLOTS_VAR, "").strip() or str(default)
    if not raw.isdigit() or int(raw) < 1:
        raise SettingsError(f"{POOL_SLOTS_VAR} must be a whole number ≥ 1, got {raw!r}")
    return int(raw)


def init_commands(slots: int) -> list[tuple[str, ...]]:
    """Return what a deployment runs once before its services (compose: ``airflow-init``):
    migrate Airflow's metadata (the FAB auth manager's tables with it), create or resize the SMTP
    pool, create or reset the roles and create the first admin user (``outreach roles sync``:
    :mod:`outreach.airflow.roles`), migrate the outreach database."""
    from outreach.airflow.defaults import SMTP_POOL, SMTP_POOL_DESCRIPTION

    return [("airflow", "db", "migrate"),
            ("airflow", "pools", "set", SMTP_POOL, str(slots), SMTP_POOL_DESCRIPTION),
            ("outreach", "roles", "sync"),
            ("outreach", "db", "upgrade")]


def shared_settings(executor: str) -> dict[str, str]:
    """Return the settings every component of a deployment gets whatever runs it (these
    processes or ``docker-compose.yaml``), without addresses, paths or secrets.

    :param executor: ``LocalExecutor`` or ``CeleryExecutor``.
    """
    from outreach.airflow.roles import AUTH_MANAGER

    out = {
        "AIRFLOW__CORE__EXECUTOR": executor,
        # Roles (issue 27): Airflow's FAB auth manager, users in the metadata database.
        "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # Which worker ran a task (the task instance's hostname): OUTREACH_WORKER_HOSTNAME where
        # several workers share one host, else the host's name (a container's, under compose).
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "outreach.hostname.hostname",
        # A worker never falls back to the embedded PostgreSQL: no database is an error.
        "OUTREACH_EMBEDDED_DB": "0",
    }
    if executor == "CeleryExecutor":
        # A slow publish to the broker must not fail a task before it starts (see the constant).
        out["AIRFLOW__CELERY__OPERATION_TIMEOUT"] = CELERY_OPERATION_TIMEOUT
    return out


def sqlalchemy_url(conninfo: str) -> str:
    """Turn a libpq URL/conninfo into a SQLAlchemy URL for Airflow's metadata (psycopg2)."""
    d = psycopg.conninfo.conninfo_to_dict(conninfo)
    user = quote(str(d.get("user", "postgres")))
    password = f":{quote(str(d['password']))}" if d.get("password") else ""
    host = str(d.get("host", ""))
    port = d.get("port")
    db = d.get("dbname", "airflow")
    if host.startswith("/"):
        return f"postgresql+psycopg2://{user}{password}@/{db}?host={quote(host)}" + (f"&port={port}" if port else "")
    return f"postgresql+psycopg2://{user}{password}@{host}{f':{port}' if port else ''}/{db}"


@dataclass
class Deployment:
    """One deployment of processes: ``home`` (AIRFLOW_HOME), ``metadata_url``, ``outreach_url``,
    ``env_extra`` (more environment), ``executor`` (``LocalExecutor`` or ``CeleryExecutor``).

    With Celery, ``workers`` workers consume ``queue`` on ``broker_url``; worker *i* is
    ``{name}-worker-{i}`` (also its ``OUTREACH_WORKER_HOSTNAME``). ``pool_slots`` and ``sizing``
    (:class:`outreach.sizing.Sizing`) fill what the environment leaves unset; ``role`` ``worker``
    starts the workers only (docs/howto/celery-scale-out.md)."""

    home: Path
    metadata_url: str
    outreach_url: str
    env_extra: dict[str, str] = field(default_factory=dict)
    port: int = 0
    log_dir: Path | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_ports: tuple[int, int] = (0, 0)
    executor: str = "LocalExecutor"
    workers: int = 0
    broker_url: str = DEFAULT_REDIS_URL
    queue: str = "default"
    name: str = "outreach"
    pool_slots: int = DEFAULT_POOL_SLOTS
    worker_log_ports: list[int] = field(default_factory=list)
    role: str = "all"
    host: str = "127.0.0.1"
    sizing: Any = None
    specs: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    supervisor: Any = None
    ready_at: float | None = None
    """When the api-server first answered (:meth:`wait_ready`): seconds since boot
    (``CLOCK_BOOTTIME``, the clock of a process's start time in ``/proc/<pid>/stat``)."""

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS.values():
            raise ValueError(f"executor must be one of {sorted(EXECUTORS.values())}, got {self.executor!r}")
        if self.executor == "CeleryExecutor" and self.workers < 1:
            raise ValueError("the CeleryExecutor needs at least one worker")
        if self.role not in ("all", "worker") or (self.role == "worker"
                                                   and self.executor != "CeleryExecutor"):
            raise ValueError(f"role must be 'all', or 'worker' with the CeleryExecutor; got "
                             f"{self.role!r} with {self.executor}")
        self.port = self.port or free_port()
        self.log_ports = (self.log_ports[0] or free_port(), self.log_ports[1] or free_port())
        self.worker_log_ports = self.worker_log_ports or [free_port() for _ in range(self.workers)]
        self.log_dir = self.log_dir or self.home / "logs-components"
        if self.sizing is None:
            from outreach.sizing import DEFAULT_MAILBOXES, Sizing

            self.sizing = Sizing(DEFAULT_MAILBOXES, workers=max(1, self.workers))

    @property
    def base_url(self) -> str:
        """The api-server's base URL (loopback only)."""
        return f"http://127.0.0.1:{self.port}"

    def worker_name(self, i: int) -> str:
        """The name of worker ``i`` (1-based): its Celery hostname and its task instances'."""
        return f"{self.name}-worker-{i}"

    def env(self) -> dict[str, str]:
        """The environment every component runs with: :func:`shared_settings`, then this
        machine's paths, ports, addresses and secrets, then ``env_extra``."""
        root = project_root()
        self.home.mkdir(parents=True, exist_ok=True)
        secret_file = self.home / "jwt_secret"
        if not secret_file.exists():
            secret_file.write_text(secrets.token_urlsafe(32))
            secret_file.chmod(0o600)
        env = dict(os.environ)
        env.update(shared_settings(self.executor))
        env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.metadata_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL")
            or f"{self.base_url}/execution/",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__HOST": self.host,
            "AIRFLOW__API__PORT": str(self.port),
            # A worker on another machine is given the api-server's secret and address.
            "AIRFLOW__API_AUTH__JWT_SECRET": env.get("AIRFLOW__API_AUTH__JWT_SECRET")
            or secret_file.read_text().strip(),
            "AIRFLOW__API__SECRET_KEY": env.get("AIRFLOW__API__SECRET_KEY")
            or secret_file.read_text().strip(),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": env.get("AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL", "10"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_ports[0]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.log_ports[1]),
            "OUTREACH_HOME": str(root),
            "OUTREACH_DATABASE_URL": self.outreach_url,
            POOL_SLOTS_VAR: str(self.pool_slots),
            # The sizing rule (outreach.sizing) where the environment says nothing.
            **{k: env.get(k) or v for k, v in self.sizing.environment(self.executor).items()
               if k not in (POOL_SLOTS_VAR, SESSIONS_VAR)},
            # A send task's sessions follow the pool this deployment really has.
            SESSIONS_VAR: env.get(SESSIONS_VAR) or str(sessions_per_task(
                self.pool_slots, self.sizing.worker_send_slots)),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "plugins"), env.get("PYTHONPATH")])),
        })
        if self.executor == "CeleryExecutor":
            env.update({
                "AIRFLOW__CELERY__BROKER_URL": self.broker_url,
                "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + self.metadata_url,
                "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
            })
        env.pop("OUTREACH_WORKER_HOSTNAME", None)
        env.update(self.env_extra)
        return env

    def migrate(self) -> None:
        """Run :func:`init_commands`' Airflow steps: migrate the metadata database, create or
        resize the SMTP pool, sync the roles and the admin user (the outreach database is the
        caller's: ``outreach db upgrade``).

        :raises RuntimeError: a command failed (output included).
        """
        env = self.env()
        for cmd in init_commands(self.pool_slots):
            if cmd == ("outreach", "db", "upgrade"):
                continue
            module = ["airflow"] if cmd[0] == "airflow" else ["outreach.cli"]
            # Only the roles step gets the admin's first password: no component ever holds it.
            step_env = env if cmd[0] == "airflow" else {**env, ADMIN_PASSWORD_VAR: self.admin_password()}
            proc = subprocess.run([sys.executable, "-m", *module, *cmd[1:]], env=step_env,
                                  capture_output=True, text=True)
            if proc.returncode:
                raise RuntimeError(f"{' '.join(cmd[:3])} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")

    def start(self) -> None:
        """Start every component in its own process group, logs in ``log_dir``: the services
        of :data:`SERVICES`, then (CeleryExecutor) ``workers`` Celery workers. What runs tasks
        (the scheduler, whose LocalExecutor runs them, and the workers) starts once the
        api-server answers (:meth:`wait_ready`): a task started before it could not report
        through it and failed its first try (seen on a restart of ``make airflow`` with tasks
        due).

        :raises RuntimeError: see :meth:`wait_ready`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = self.env()
        services = list(SERVICES.values()) if self.role == "all" else []
        runs_tasks = [cmd for cmd in services if cmd == ("scheduler",)]
        for cmd in [c for c in services if c not in runs_tasks]:
            args = list(cmd)
            if cmd == ("api-server",):
                args += ["--host", self.host, "--port", str(self.port)]
            self._spawn(cmd[0], args, env)
        if services:
            self.wait_ready()
        for cmd in runs_tasks:
            self._spawn(cmd[0], list(cmd), env)
        if self.executor == "CeleryExecutor":
            # issue 31: the workers' settings are checked before they start (config_gate)
            config_gate({**env, "OUTREACH_WORKER_HOSTNAME": self.worker_name(1)}, "Celery workers")
            for i in range(1, self.workers + 1):
                name = self.worker_name(i)
                # Workers started alone next to a deployment log under their own names.
                key = f"worker-{i}" if self.role == "all" else name
                self._spawn(key, [*WORKER[1], "--celery-hostname", f"{name}@%h",
                                            "--queues", self.queue],
                            {**env, "OUTREACH_WORKER_HOSTNAME": name,
                             "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.worker_log_ports[i - 1])})

    def _spawn(self, key: str, args: list[str], env: dict[str, str]) -> None:
        self.specs[key] = (args, env)
        self.procs[key] = self.respawn(key)

    def respawn(self, key: str) -> subprocess.Popen:
        """Start component ``key`` (as :meth:`start` did: same command, same environment, its
        log appended to) and return the process; the caller stores it (the supervisor does)."""
        args, env = self.specs[key]
        assert self.log_dir
        old = self.procs.get(key)
        if old is not None and old.poll() is not None:
            # What the exited process left in its group (a worker's log server holding its
            # port): gone before the new one binds it. Task processes have groups of their own
            # and finish on their own: their claims stay theirs.
            try:
                os.killpg(old.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        with open(self.log_dir / f"{key}.log", "ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen([sys.executable, "-m", "airflow", *args], env=env,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def supervise(self, say: Any = print) -> Any:
        """Restart every component that exits, with backoff, in a background thread
        (:class:`outreach.dev.supervise.Supervisor`); :meth:`stop` ends it first. Return it."""
        from outreach.dev.supervise import Supervisor

        assert self.log_dir
        self.supervisor = Supervisor(self.procs, self.respawn, say=say, logs={
            k: str(self.log_dir / f"{k}.log") for k in self.procs}).start_thread()
        return self.supervisor

    def kill_worker(self, i: int) -> None:
        """SIGKILL Celery worker ``i`` and everything it started: a worker machine that dies
        mid-task. Its process group and every descendant: Airflow's supervisor runs each task
        process in a process group of its own, which a signal to the worker's group misses."""
        import psutil

        p = self.procs[f"worker-{i}"]
        try:
            tree = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for child in tree:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        p.wait()

    def wait_ready(self, timeout: float = 180) -> None:
        """Wait until the api-server answers.

        :raises RuntimeError: a component exited, or ``timeout`` seconds passed.
        """
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    log_file = self.log_dir / f"{name}.log"
                    raise RuntimeError(f"airflow {name} exited with {p.returncode}; see {log_file}")
            try:
                if http_client().get(f"{self.base_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    self.ready_at = self.ready_at or time.clock_gettime(time.CLOCK_BOOTTIME)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"the api-server did not answer within {timeout} s; see {self.log_dir}")

    def up(self, dag_ids: tuple[str, ...], timeout: float = 900, *, migrate: bool = True) -> str:
        """Migrate (unless ``migrate`` is false: a metadata database already migrated, such as a
        restored copy), start, wait for the api-server and for the DAG processor to have parsed
        ``dag_ids``, then unpause them; return a REST API token.

        :raises RuntimeError: a component exited, or a step took longer than ``timeout`` seconds.
        """
        if migrate:
            self.migrate()
        self.start()
        self.wait_ready(timeout=timeout)
        token = self.token()
        deadline = time.monotonic() + timeout
        while not set(dag_ids) <= {d["dag_id"] for d in self.api("GET", "/dags", token)["dags"]}:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{dag_ids} not parsed within {timeout} s; see {self.log_dir}")
            time.sleep(0.5)
        for dag_id in dag_ids:
            self.api("PATCH", f"/dags/{dag_id}", token, json={"is_paused": False})
        return token

    def stop(self, grace: float = 30, api_grace: float = 10, task_grace: float = 10) -> None:
        """Stop every component: the supervisor first (nothing is started again), then SIGTERM to
        every process group but the api-server's, waiting up to ``grace`` seconds (the executors
        let their running tasks end, and a task ending reports its state through the
        api-server), then the api-server, up to ``api_grace`` seconds; SIGKILL to what is left.
        Stopped all at once, a task that was running could not report and stayed ``running``
        while the scheduler waited for it until the grace ran out.

        A task process Airflow put in a process group of its own outlives its executor's group:
        every descendant of a component but the api-server seen while they stop is remembered,
        and one still running once the components are gone gets SIGTERM (a send task stops
        before its next row and gives its rows back: :func:`outreach.airflow.tasks_send.send_task`),
        up to ``task_grace`` seconds while the api-server still runs, then SIGKILL: nothing a
        deployment started sends on after its stop."""
        import psutil

        if self.supervisor is not None:
            self.supervisor.stop()
        api = {k: p for k, p in self.procs.items() if k == "api-server"}  # its key: start()
        rest = {k: p for k, p in self.procs.items() if k not in api}
        seen: dict[int, psutil.Process] = {}

        def remember() -> None:  # the tasks' side only: the api-server's workers serve them
            for p in rest.values():
                try:
                    for child in psutil.Process(p.pid).children(recursive=True):
                        seen.setdefault(child.pid, child)
                except psutil.NoSuchProcess:
                    pass

        for group, seconds in ((rest, grace), (api, api_grace)):
            remember()
            for p in group.values():
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + seconds
            while any(p.poll() is None for p in group.values()) and time.monotonic() < deadline:
                remember()
                time.sleep(0.2)
            if group is rest:
                _end_processes(list(seen.values()), task_grace)
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)  # stragglers and any task processes left behind
            except ProcessLookupError:
                pass
            p.wait()

    def admin_password(self) -> str:
        """Return the first password of the user ``admin`` (:mod:`outreach.airflow.roles`):
        ``OUTREACH_ADMIN_PASSWORD`` from ``env_extra`` or the environment, else the one generated
        into ``home/admin_password`` (mode 0600) the first time, and kept."""
        given = self.env_extra.get(ADMIN_PASSWORD_VAR) or os.environ.get(ADMIN_PASSWORD_VAR)
        if given:
            return given
        path = self.home / "admin_password"
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(18))
        return path.read_text().strip()

    def token(self, user: str = ADMIN_USER, password: str | None = None) -> str:
        """Log in through the REST API (``POST /auth/token``, the FAB auth manager's
        ``create_token``: username and password) and return a JWT; ``password`` defaults to
        :meth:`admin_password`."""
        r = http_client().post(f"{self.base_url}/auth/token", timeout=30,
                       json={"username": user, "password": password or self.admin_password()})
        r.raise_for_status()
        return r.json()["access_token"]

    def api(self, method: str, path: str, token: str, **kw: Any) -> Any:
        """Call the REST API (``/api/v2`` + path) and return the JSON body.

        :raises httpx.HTTPStatusError: a non-2xx answer.
        """
        r = http_client().request(method, f"{self.base_url}/api/v2{path}", timeout=60,
                          headers={"Authorization": f"Bearer {token}"}, **kw)
        r.raise_for_status()
        return r.json() if r.content else None


_HTTP: Any = None
_HTTP_LOCK = threading.Lock()


def http_client() -> Any:
    """The ``httpx.Client`` of every call to a deployment's API (:meth:`Deployment.api`, its
    health checks and logins), made at the first. ``httpx.request`` builds a client, with its TLS
    context, per call: ~27 CPU-milliseconds a call against ~1.5 with one client, and the tests poll
    the API every half second. It keeps no connection open between calls: nothing is left for
    anyone to close."""
    global _HTTP
    with _HTTP_LOCK:
        if _HTTP is None:
            import httpx

            _HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
        return _HTTP


def load_dotenv_file(path: Path) -> None:
    """Load ``KEY=value`` lines from ``path`` into the environment (existing variables win)."""
    if path.exists():
        from dotenv import dotenv_values

        for k, v in dotenv_values(path).items():
            if v is not None:
                os.environ.setdefault(k, v)


def check_redis(url: str) -> None:
    """Ping the Celery broker.

    :raises outreach.settings.SettingsError: it does not answer (one line: what to set).
    """
    from urllib.parse import urlsplit

    import redis

    from outreach.settings import SettingsError

    try:
        redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5).ping()
    except (redis.RedisError, ValueError) as exc:
        where = urlsplit(url)
        shown = f"{where.scheme}://{where.hostname}:{where.port or 6379}{where.path}"  # no password
        raise SettingsError(f"cannot reach Redis at {shown} ({exc}): start it or set "
                            "REDIS_URL") from None


def celery_databases() -> tuple[str, str]:
    """Return the outreach database URL and the metadata SQLAlchemy URL of a Celery deployment.

    Never the embedded server (other machines could not reach it); the metadata defaults to a
    database ``airflow`` on the same server, created when missing.

    :raises outreach.settings.SettingsError: no outreach database is configured, or the metadata
        database cannot be created there."""
    from outreach.airflow.connections import database_url
    from outreach.dev import embedded
    from outreach.settings import SettingsError

    outreach_url = database_url()
    metadata = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    if not metadata:
        try:
            metadata = sqlalchemy_url(embedded.ensure_database(outreach_url, "airflow"))
        except psycopg.Error as exc:
            raise SettingsError(f"cannot create the Airflow metadata database 'airflow' next to the "
                                f"outreach database ({str(exc).strip().splitlines()[0]}): set "
                                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") from None
    return outreach_url, metadata


def running_pool_slots(metadata_url: str) -> int | None:
    """The slots of the pool ``outreach_smtp`` in a running deployment's metadata database (a
    SQLAlchemy URL), or ``None`` when it cannot be read. A worker started later or on another
    machine takes the pool from there, not from the sizing rule for the workers it starts itself,
    so it groups a run's sessions into tasks as the deployment's DAG processor does
    (:func:`outreach.sizing.sessions_per_task` of the same pool)."""
    from outreach.airflow.defaults import SMTP_POOL
    from outreach.db import libpq_url

    try:
        with psycopg.connect(libpq_url(metadata_url), connect_timeout=5) as conn:
            row = conn.execute("SELECT slots FROM slot_pool WHERE pool = %s", (SMTP_POOL,)).fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row and row[0] and row[0] > 0 else None


def config_gate(env: dict[str, str], who: str) -> None:
    """Run ``outreach config check --skip connections`` with the environment ``env`` a component gets,
    so a bad setting stops it before it starts (connections are often added in the UI later).

    :param who: what is about to start (in the error).
    :raises outreach.settings.SettingsError: a problem (all of them, one line each)."""
    from outreach.settings import SettingsError

    proc = subprocess.run([sys.executable, "-m", "outreach.cli", "config", "check", "--skip",
                           "connections"], env=env, capture_output=True, text=True)
    if proc.returncode:
        problems = [line.removeprefix("outreach: config: ") for line in proc.stderr.splitlines()
                    if line.startswith("outreach: config: ")] or proc.stderr.strip().splitlines()[-3:]
        raise SettingsError(f"{who} not started: config check found {len(problems)} "
                            "problem(s):\n  " + "\n  ".join(problems))


def capacity(executor: str, workers: int, outreach_url: str) -> Any:
    """Return the sizing rule's numbers for this deployment (:func:`outreach.sizing.from_environment`,
    mailboxes counted in ``outreach_url``) and print them, with one warning line per configured
    value that caps what the workers could do (:func:`outreach.sizing.caps`).

    :param executor: ``local`` (one worker) or ``celery`` (``workers`` workers).
    """
    from outreach.sizing import caps, from_environment

    sizing = from_environment(workers if executor == "celery" else 1, outreach_url)
    given = {**sizing.environment(EXECUTORS[executor]),
             **{k: os.environ[k] for k in sizing.environment(EXECUTORS[executor])
                if os.environ.get(k, "").strip().isdigit()}}
    print(f"outreach airflow: {sizing.line()}", flush=True)
    for line in caps(sizing, pool_slots=int(given[POOL_SLOTS_VAR]),
                     send_parallelism=int(given["OUTREACH_SEND_PARALLELISM"]),
                     parallelism=int(given["AIRFLOW__CORE__PARALLELISM"]),
                     worker_concurrency=int(given["AIRFLOW__CELERY__WORKER_CONCURRENCY"])
                     if executor == "celery" else None,
                     per_task=int(given["OUTREACH_SEND_SESSIONS_PER_TASK"])):
        print(f"outreach airflow: warning: {line}", file=sys.stderr, flush=True)
    return sizing


def run_foreground(executor: str = "local", workers: int = 2) -> int:
    """``make airflow [EXECUTOR=celery WORKERS=N]``: start the deployment until Ctrl-C; return the exit code.

    :param executor: ``local`` (the embedded PostgreSQL when no database is configured) or
        ``celery`` (``workers`` workers; the configured PostgreSQL and ``REDIS_URL`` only).
    :raises outreach.settings.SettingsError: Celery without a database, or Redis unreachable."""
    from outreach.dev import embedded
    from outreach.migrate import upgrade

    root = project_root()
    load_dotenv_file(root / ".env")
    os.environ.setdefault("OUTREACH_PUBLIC_URL", "https://unsubscribe.outreach-demo.example")
    if not os.environ.get("OUTREACH_UNSUBSCRIBE_SECRET"):
        from outreach.dev.demo import demo_secret
        from outreach.paths import state_dir

        os.environ["OUTREACH_UNSUBSCRIBE_SECRET"] = demo_secret(state_dir())
    extra: dict[str, Any] = {}
    if executor == "celery":
        outreach_url, metadata = celery_databases()
        broker = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
        check_redis(broker)
        extra = {"workers": workers, "broker_url": broker}
    else:
        outreach_url = DatabaseSettings().database_url
        admin_url = None
        if not outreach_url or not os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
            os.environ.setdefault(embedded.OPT_IN, "1")  # this local launcher is the opt-in
            admin_url = embedded.start(stop_at_exit=True)
        outreach_url = outreach_url or embedded.ensure_database(admin_url)
        metadata = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or sqlalchemy_url(
            embedded.ensure_database(admin_url, "airflow"))
    upgrade(outreach_url)
    sizing = capacity(executor, workers, outreach_url)
    dep = Deployment(home=root / ".airflow-deploy", metadata_url=metadata, outreach_url=outreach_url,
                     port=int(os.environ.get("OUTREACH_AIRFLOW_PORT", "8080")),
                     executor=EXECUTORS[executor], pool_slots=pool_slots(sizing.pool_slots),
                     sizing=sizing, host=os.environ.get("OUTREACH_AIRFLOW_HOST", "127.0.0.1"), **extra)
    print(f"outreach airflow: {dep.executor}"
          + (f" with {workers} Celery worker(s)" if executor == "celery" else "")
          + f"; migrating the metadata database, SMTP pool of {dep.pool_slots} …", flush=True)
    dep.migrate()
    config_gate(dep.env(), "Airflow")  # issue 31: a bad setting stops here, not in a task
    stop = {"now": False}

    def _handler(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)
    try:
        dep.start()  # returns once the api-server answers
        where = (ADMIN_PASSWORD_VAR if os.environ.get(ADMIN_PASSWORD_VAR)
                 else dep.home / "admin_password")
        print(f"\nAirflow is up: {dep.base_url}  (user {ADMIN_USER}, first password in {where}; "
              "more users and roles: docs/howto/users-and-roles.md)")
        print(f"Component logs: {dep.log_dir}.  A component that exits is started again; "
              "Ctrl-C stops everything.\n", flush=True)
        dep.supervise()
        while not stop["now"]:
            time.sleep(1)
        return 0
    finally:
        print("stopping Airflow …", flush=True)
        dep.stop()
        db_stops = embedded.stops_at_exit()
        print("stopped." + {None: "", True: " The embedded PostgreSQL it started stops now.",
                            False: " The embedded PostgreSQL keeps running, as it was before "
                                   "(`outreach db stop` or `make stop` stops it)."}[db_stops])


def run_worker_foreground(workers: int = 1, name: str | None = None) -> int:
    """``outreach airflow worker``: start ``workers`` Celery workers only, for a deployment running
    elsewhere, until Ctrl-C; return the exit code. Nothing is migrated.

    The environment it needs: docs/howto/celery-scale-out.md.

    :param name: worker *i* is ``{name}-worker-{i}`` (default: this host's name and process id).
    :raises outreach.settings.SettingsError: no database, or Redis unreachable."""
    import socket

    root = project_root()
    load_dotenv_file(root / ".env")
    outreach_url, metadata = celery_databases()
    broker = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    check_redis(broker)
    sizing = capacity("celery", workers, outreach_url)
    # The running deployment's pool, not the rule's for these workers alone: the DAG's pool slots
    # a send task and the plan's grouping must agree with the DAG processor's.
    running = None if os.environ.get(POOL_SLOTS_VAR, "").strip() else running_pool_slots(metadata)
    if running:
        print(f"outreach airflow worker: pool outreach_smtp has {running} slots in the running "
              f"deployment: {SESSIONS_VAR} follows it", flush=True)
    dep = Deployment(home=root / ".airflow-deploy", metadata_url=metadata, outreach_url=outreach_url,
                     port=int(os.environ.get("OUTREACH_AIRFLOW_PORT", "8080")),
                     executor="CeleryExecutor", workers=workers, broker_url=broker, role="worker",
                     name=name or f"{socket.gethostname().split('.')[0]}-{os.getpid()}",
                     pool_slots=running or pool_slots(sizing.pool_slots), sizing=sizing)
    stop = {"now": False}

    def _handler(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)
    dep.start()
    print(f"outreach airflow worker: {workers} Celery worker(s) "
          f"{', '.join(dep.worker_name(i) for i in range(1, workers + 1))} on {broker.split('@')[-1]} "
          f"for {dep.env()['AIRFLOW__CORE__EXECUTION_API_SERVER_URL']}; logs in {dep.log_dir}. "
          "A worker that exits is started again; Ctrl-C stops them.", flush=True)
    try:
        dep.supervise()
        while not stop["now"]:
            time.sleep(1)
        return 0
    finally:
        print("stopping the workers …", flush=True)
        dep.stop()
        print("stopped.")


def _end_processes(procs: list[Any], grace: float) -> None:
    """SIGTERM each of ``procs`` (``psutil.Process``) still running and not a zombie, wait up to
    ``grace`` seconds, then SIGKILL what is left (a zombie only waits for its parent to reap it)."""
    import psutil

    def live(q: Any) -> bool:
        try:
            return bool(q.is_running()) and q.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    left = [q for q in procs if live(q)]
    for q in left:
        try:
            q.terminate()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + grace
    while (left := [q for q in left if live(q)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for q in left:
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
