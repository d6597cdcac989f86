"""A local Airflow deployment as people run it: api-server, scheduler, dag-processor and
triggerer with the LocalExecutor, metadata in PostgreSQL.

``make airflow`` (``outreach airflow``) runs it in the foreground until Ctrl-C; the integration
test drives the same :class:`Deployment` through Airflow's REST API. Metadata lives in a separate
database (``airflow``) of the embedded server unless ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` is
set; outreach's own data stays in its own database. Connections and settings come from the
environment or a ``.env`` file in the project root (never committed).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from outreach.devsmtp import free_port
from outreach.paths import project_root

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


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
    """One running deployment. ``home``: AIRFLOW_HOME; ``metadata_url``: SQLAlchemy URL;
    ``outreach_url``: the outreach database; ``env_extra``: more environment (connections…)."""

    home: Path
    metadata_url: str
    outreach_url: str
    env_extra: dict[str, str] = field(default_factory=dict)
    port: int = 0
    log_dir: Path | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_ports: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.log_ports = (self.log_ports[0] or free_port(), self.log_ports[1] or free_port())
        self.log_dir = self.log_dir or self.home / "logs-components"

    @property
    def base_url(self) -> str:
        """The api-server's base URL (loopback only)."""
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment every component runs with."""
        root = project_root()
        self.home.mkdir(parents=True, exist_ok=True)
        secret_file = self.home / "jwt_secret"
        if not secret_file.exists():
            secret_file.write_text(secrets.token_urlsafe(32))
            secret_file.chmod(0o600)
        env = dict(os.environ)
        env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": env.get("AIRFLOW__CORE__PARALLELISM", "4"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.metadata_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API_AUTH__JWT_SECRET": secret_file.read_text().strip(),
            "AIRFLOW__API__SECRET_KEY": secret_file.read_text().strip(),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": env.get("AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL", "10"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_ports[0]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.log_ports[1]),
            "OUTREACH_HOME": str(root),
            "OUTREACH_DATABASE_URL": self.outreach_url,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "plugins"), env.get("PYTHONPATH")])),
        })
        env.update(self.env_extra)
        return env

    def migrate(self) -> None:
        """Create or upgrade the metadata database.

        :raises RuntimeError: ``airflow db migrate`` failed (output included).
        """
        proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=self.env(),
                              capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")

    def start(self) -> None:
        """Start every component in its own process group, logs in ``log_dir``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = self.env()
        for name in COMPONENTS:
            args = [sys.executable, "-m", "airflow", name]
            if name == "api-server":
                args += ["--host", "127.0.0.1", "--port", str(self.port)]
            log = open(self.log_dir / f"{name}.log", "ab")
            self.procs[name] = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float = 180) -> None:
        """Wait until the api-server answers.

        :raises RuntimeError: a component exited, or ``timeout`` seconds passed.
        """
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"airflow {name} exited with {p.returncode}; see {self.log_dir / (name + '.log')}")
            try:
                if httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"the api-server did not answer within {timeout} s; see {self.log_dir}")

    def stop(self, grace: float = 30) -> None:
        """SIGTERM every process group, wait up to ``grace`` seconds, then SIGKILL what is left."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)  # stragglers and any task processes left behind
            except ProcessLookupError:
                pass
            p.wait()

    def admin_password(self, user: str = "admin") -> str:
        """Return the generated password of a simple-auth-manager user (after the api-server started)."""
        path = self.home / "simple_auth_manager_passwords.json.generated"
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        return json.loads(path.read_text())[user]

    def token(self, user: str = "admin") -> str:
        """Log in through the REST API and return a JWT."""
        import httpx

        r = httpx.post(f"{self.base_url}/auth/token",
                       json={"username": user, "password": self.admin_password(user)}, timeout=30)
        r.raise_for_status()
        return r.json()["access_token"]

    def api(self, method: str, path: str, token: str, **kw: Any) -> Any:
        """Call the REST API (``/api/v2`` + path) and return the JSON body.

        :raises httpx.HTTPStatusError: a non-2xx answer.
        """
        import httpx

        r = httpx.request(method, f"{self.base_url}/api/v2{path}", timeout=60,
                          headers={"Authorization": f"Bearer {token}"}, **kw)
        r.raise_for_status()
        return r.json() if r.content else None


def load_dotenv_file(path: Path) -> None:
    """Load ``KEY=value`` lines from ``path`` into the environment (existing variables win)."""
    if path.exists():
        from dotenv import dotenv_values

        for k, v in dotenv_values(path).items():
            if v is not None:
                os.environ.setdefault(k, v)


def run_foreground() -> int:
    """``make airflow``: start the deployment and keep it up until Ctrl-C; return the exit code."""
    from outreach import embedded
    from outreach.migrate import upgrade

    root = project_root()
    load_dotenv_file(root / ".env")
    os.environ.setdefault("OUTREACH_PUBLIC_URL", "https://unsubscribe.outreach-demo.example")
    if not os.environ.get("OUTREACH_UNSUBSCRIBE_SECRET"):
        from outreach.demo import demo_secret
        from outreach.paths import state_dir

        os.environ["OUTREACH_UNSUBSCRIBE_SECRET"] = demo_secret(state_dir())
    outreach_url = os.environ.get("OUTREACH_DATABASE_URL")
    admin_url = None
    if not outreach_url or not os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        os.environ.setdefault(embedded.OPT_IN, "1")  # this local launcher is the opt-in
        admin_url = embedded.start(stop_at_exit=True)
    outreach_url = outreach_url or embedded.ensure_database(admin_url)
    metadata = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or sqlalchemy_url(
        embedded.ensure_database(admin_url, "airflow"))
    upgrade(outreach_url)
    dep = Deployment(home=root / ".airflow-deploy", metadata_url=metadata, outreach_url=outreach_url,
                     port=int(os.environ.get("OUTREACH_AIRFLOW_PORT", "8080")))
    print("outreach airflow: migrating the metadata database …", flush=True)
    dep.migrate()
    stop = {"now": False}

    def _handler(signum, frame):  # noqa: ARG001
        stop["now"] = True

    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)
    dep.start()
    try:
        dep.wait_ready()
        print(f"\nAirflow is up: {dep.base_url}  (user admin, password {dep.admin_password()})")
        print(f"Component logs: {dep.log_dir}.  Ctrl-C stops everything.\n", flush=True)
        while not stop["now"]:
            for name, p in dep.procs.items():
                if p.poll() is not None:
                    print(f"airflow {name} exited ({p.returncode}); stopping. See {dep.log_dir}", file=sys.stderr)
                    return 1
            time.sleep(1)
        return 0
    finally:
        print("stopping Airflow …", flush=True)
        dep.stop()
        print("stopped.")
