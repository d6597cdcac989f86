"""The real deployment for the acceptance tests: api-server, scheduler, dag-processor and
triggerer (:class:`outreach.dev.deploy.Deployment`, own PostgreSQL metadata database) started and
stopped around a test, and the REST API calls the tests make of it (trigger, wait, clear).

The metadata database is migrated once per run (:func:`metadata_dump`: the deployment's own
``airflow db migrate``, ``airflow pools set`` and roles, ~40 CPU-seconds), restored from its
dump into each worker's server (:func:`airflow_meta_template`) and cloned per deployment with
``CREATE DATABASE … TEMPLATE`` (well under a second)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
import pytest

from outreach.dev import embedded
from outreach.dev.deploy import Deployment, sqlalchemy_url
from outreach.dev.devsmtp import MaildirServer, empty_maildir
from support.alerts import OPS
from support.embeddedpg import clone_database
from support.inboxflow import IMAP_CONN_IDS
from support.once import once
from support.paths import SMTP_CONN_IDS

FINAL = {"success", "failed"}
ADMIN_PASSWORD = "admin-test-password-0123"
"""The first password of the user ``admin``, created in the template by ``outreach roles sync``
(FAB auth manager): every deployment cloned from it logs in with it."""


def admin_execute(pg_admin_url: str, sql: str) -> None:
    """Run one statement on the server of ``pg_admin_url`` outside a transaction (CREATE/DROP
    DATABASE)."""
    with psycopg.connect(pg_admin_url, autocommit=True) as c:
        c.execute(sql)


def _pg_tool(name: str) -> str:
    """``pg_dump`` / ``pg_restore`` of the newest major version at hand: the pgserver wheel's (the
    embedded server's) or the one on PATH (a newer server named by OUTREACH_TEST_ADMIN_URL has
    its own; ``pg_dump`` refuses a server newer than itself)."""
    import re
    import shutil

    from pgserver._commands import POSTGRES_BIN_PATH

    def major(tool: str) -> int:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"(\d+)(?:\.\d+)?", out)
        return int(found.group(1)) if found else 0

    tools = [t for t in (str(POSTGRES_BIN_PATH / name), shutil.which(name)) if t]
    return max(tools, key=major)


def metadata_dump(pg_admin_url: str, tmp_path_factory) -> Path:
    """A ``pg_dump`` of a metadata database migrated by a deployment's own
    :meth:`~outreach.dev.deploy.Deployment.migrate` (default SMTP pool, the roles, the user
    ``admin`` with :data:`ADMIN_PASSWORD`), made once per run on the first caller's server
    (:func:`support.once.once`)."""

    def migrate_and_dump(folder: Path) -> None:
        name = f"airflow_meta_mig_{uuid.uuid4().hex[:8]}"
        meta_url = embedded.ensure_database(pg_admin_url, name)
        Deployment(home=tmp_path_factory.mktemp("airflow-meta-template"), metadata_url=sqlalchemy_url(meta_url),
                   outreach_url="postgresql:///unused",
                   env_extra={"OUTREACH_ADMIN_PASSWORD": ADMIN_PASSWORD}).migrate()
        subprocess.run([_pg_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
                        "--file", str(folder / "metadata.dump"), "--dbname", meta_url], check=True)
        admin_execute(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    folder, _ = once("airflow-metadata", migrate_and_dump)
    return folder / "metadata.dump"


def restore_metadata(dump: Path, url: str) -> None:
    """Restore :func:`metadata_dump` into the empty database ``url`` (a second or two, against
    ~40 CPU-seconds for a migration)."""
    subprocess.run([_pg_tool("pg_restore"), "--no-owner", "--no-privileges", "--exit-on-error",
                    "--dbname", url, str(dump)], check=True)


@pytest.fixture(scope="session")
def airflow_meta_template(pg_admin_url: str, tmp_path_factory) -> str:
    """Name of a migrated metadata database (:func:`metadata_dump`, restored), never started: the
    template :func:`running_deployment` clones."""
    name = f"airflow_meta_tpl_{uuid.uuid4().hex[:8]}"
    restore_metadata(metadata_dump(pg_admin_url, tmp_path_factory),
                     embedded.ensure_database(pg_admin_url, name))
    yield name
    admin_execute(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def running_deployment(pg_admin_url: str, template: str, db_url: str, tmp_path, env: dict[str, str]):
    """Start the real deployment with ``env``, its metadata database a clone of ``template``
    (:func:`airflow_meta_template`); stop it after, and check that no process is left behind."""
    meta = f"airflow_meta_{uuid.uuid4().hex[:8]}"
    clone_database(pg_admin_url, meta, template)
    dep = Deployment(home=tmp_path / "airflow", metadata_url=sqlalchemy_url(embedded.with_database(pg_admin_url, meta)),
                     outreach_url=db_url, env_extra={"OUTREACH_ADMIN_PASSWORD": ADMIN_PASSWORD, **env})
    try:
        dep.start()  # returns once the api-server answers
        # What runs tasks starts after that, or its first tasks fail their try (a newcomer's restart).
        assert dep.ready_at and started_since_boot(dep.procs["scheduler"].pid) >= dep.ready_at - 0.02
        yield dep
    finally:
        pids = [p.pid for p in dep.procs.values()]
        dep.stop()
        time.sleep(1)
        left = [p for p in psutil.process_iter(["pid", "cmdline", "environ"])
                if p.info["environ"] and p.info["environ"].get("AIRFLOW_HOME") == str(dep.home)]
        assert not left, f"processes left behind: {[p.info['cmdline'] for p in left]} (started {pids})"
        admin_execute(pg_admin_url, f'DROP DATABASE IF EXISTS "{meta}" WITH (FORCE)')


def started_since_boot(pid: int) -> float:
    """When process ``pid`` started, in seconds since boot (``/proc/<pid>/stat`` field 22, in
    clock ticks): exact to a tick, where psutil's ``create_time`` adds the boot time's whole
    second (0.9 s off on this machine)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # from field 3 (state) on
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def add_user(dep: Deployment, admin_token: str, username: str, role: str) -> str:
    """Create a user with one role through the FAB auth manager's REST API
    (``POST /auth/fab/v1/users``, as an admin); return its password."""
    import httpx

    password = f"{username}-pw-{uuid.uuid4().hex[:12]}"
    r = httpx.post(f"{dep.base_url}/auth/fab/v1/users", timeout=60,
                   headers={"Authorization": f"Bearer {admin_token}"},
                   json={"username": username, "email": f"{username}@roles.test.example",
                         "first_name": username, "last_name": "test", "roles": [{"name": role}],
                         "password": password})
    r.raise_for_status()
    return password


DAG_FILES_PARSED_ONCE = {"AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600"}
"""A test deployment's dag-processor parses each DAG file when it first sees it, then not again
(Airflow's default: every 30 s). No test edits a DAG file while its deployment runs, and the
re-parses were the dag-processor's CPU: ~170 CPU-seconds of a whole ``make test``."""

def only_dags(folder: Path, *dag_ids: str) -> dict[str, str]:
    """The setting that gives a test deployment a DAG folder of copies of the shipped files of
    ``dag_ids`` only (made in ``folder``): its dag-processor parses those, not all 26 (~8 CPU-s
    of a deployment's start). For a test that proves what it proves with those DAGs; the
    newcomer's walkthrough keeps the whole folder, and tests/dags/test_airflow.py's
    ``test_every_dag_loads_without_database_or_network`` parses every file."""
    from support.paths import ROOT

    folder.mkdir(parents=True, exist_ok=True)
    for dag_id in dag_ids:
        shutil.copy(ROOT / "dags" / f"{dag_id}.py", folder)
    return {"AIRFLOW__CORE__DAGS_FOLDER": str(folder)}


# Only the runs a test triggers: a scheduled outreach_send firing at a 10-minute boundary would
# send rows the counts expect to be still queued.
BASE_ENV = {"OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
            "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
            "OUTREACH_BATCH_SIZE": "25",
            "OUTREACH_SEND_INTERVAL_MINUTES": "0",
            "OUTREACH_SEND_GAP_SECONDS": "0",
            "OUTREACH_SEND_PARALLELISM": "4",
            "OUTREACH_SCHEDULES": "off",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            **DAG_FILES_PARSED_ONCE}


LOCAL_DEPLOYMENT_FILES = ("tests/acceptance/test_campaign_approval.py",
                          "tests/acceptance/test_deployment.py",
                          "tests/acceptance/test_event_assets_deployment.py",
                          "tests/acceptance/test_operator_ui_deployment.py",
                          "tests/acceptance/test_roles_deployment.py")
"""The modules whose tests share one deployment (:func:`local_deployment`): ``make test`` sends
them to one pytest-xdist worker as one unit (``pytest_xdist_make_scheduler`` in
tests/conftest.py), so the deployment starts once for them (~26 CPU-seconds a start: api-server
~12, scheduler ~5, dag-processor and triggerer ~4.5 each)."""

LOCAL_DEPLOYMENT_DAGS = ("outreach_campaign_approval", "outreach_import_leads", "outreach_inbox",
                         "outreach_queue_due", "outreach_send", "outreach_transactional",
                         "outreach_unconfirmed_review", "outreach_unsuppress")


@dataclass
class LocalDeployment:
    """The shared deployment as a test gets it: ``dep`` (its token: ``token``), the outreach
    database ``url`` (empty, migrated), the mailboxes' SMTP server ``relay`` and the alerts'
    ``alerts`` (every demo mailbox's and ``outreach_alerts``' connection; both empty), the
    demo inboxes' accounts on the session's Dovecot ``imap_logins`` (``{conn_id: login}``, for
    ``ImapAccounts.adopt``; made at the deployment's start) and its ``dags_folder``."""

    dep: Deployment
    token: str
    url: str
    relay: MaildirServer
    alerts: MaildirServer
    imap_logins: dict[str, str]
    dags_folder: Path

    def restart_relay(self) -> MaildirServer:
        """Start the relay again on its port (after a test stopped it), keeping what it holds."""
        self.relay = _restarted(self.relay)
        return self.relay


class _SharedLocalDeployment:
    """Starts the shared deployment at its first test and resets it before each test: each DAG
    paused or not as the deployment first parsed it (one a test added: paused), then every DAG
    run deleted (through the REST API: a test reads its own runs, and none of another test's is
    left running), the outreach database dropped and cloned again from the migrated template
    under the same name (the deployment's ``OUTREACH_DATABASE_URL``), both SMTP servers started
    afresh on their ports with empty Maildirs. Not reset: the IMAP accounts (one test reads
    them), the users a test added, the DAG files a test dropped. Stopped after the last test of
    :data:`LOCAL_DEPLOYMENT_FILES` (``pytest_runtest_teardown`` below), or at the end of the
    session. A task still running when a test ends is not waited for: deleting its run makes
    Airflow stop it at its next heartbeat (seconds), so a test that fails mid-run may leave one
    briefly beside the next test's reset."""

    def __init__(self, pg_admin_url: str, meta_template: str, outreach_template: str, folder: Path,
                 dovecot) -> None:
        self._admin, self._meta, self._template, self._folder, self._dovecot = (
            pg_admin_url, meta_template, outreach_template, folder, dovecot)
        self._stack: contextlib.ExitStack | None = None
        self._paused: dict[str, bool] = {}
        self.current: LocalDeployment | None = None

    def get(self) -> LocalDeployment:
        if self.current is None:
            self._start()
        else:
            self._reset()
        assert self.current
        return self.current

    def _start(self) -> None:
        run = uuid.uuid4().hex[:8]  # started again (other tests ran between): all new
        folder, name = self._folder / run, f"outreach_shared_{run}"
        stack = contextlib.ExitStack()
        try:
            clone_database(self._admin, name, self._template)
            stack.callback(admin_execute, self._admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            url = embedded.with_database(self._admin, name)
            servers = {"relay": MaildirServer(folder / "relay").start()}
            servers["alerts"] = MaildirServer(folder / "alerts").start()
            # The servers running when it stops: a reset or a test starts them again.
            stack.callback(lambda: [_stop_quietly(self._live(k, v)) for k, v in servers.items()])
            relay, alerts = servers["relay"], servers["alerts"]
            imap = {c: self._dovecot.add_user(f"{c}-{run}@imap.test") for c in IMAP_CONN_IDS}
            env = {**BASE_ENV, "OUTREACH_PREFLIGHT": "off",
                   # One session a send task: the main-job test counts the tasks and their tries
                   # (one handed-off, unrecorded row per failed try); several sessions a task:
                   # tests/dags/test_send_sessions_dag.py and the Celery tests.
                   "OUTREACH_SEND_SESSIONS_PER_TASK": "1",
                   **{f"AIRFLOW_CONN_{c.upper()}": relay.connection_json(timeout=10) for c in SMTP_CONN_IDS},
                   "AIRFLOW_CONN_OUTREACH_ALERTS": alerts.connection_json(),
                   "OUTREACH_ALERT_TO": OPS, "OUTREACH_ALERT_FROM": "outreach@outreach-test.example",
                   **{f"AIRFLOW_CONN_{c.upper()}": self._dovecot.connection_json(login)
                      for c, login in imap.items()},
                   **only_dags(folder / "dags", *LOCAL_DEPLOYMENT_DAGS)}
            dep = stack.enter_context(running_deployment(self._admin, self._meta, url, folder, env))
            token = dep.token()
            dags = wait_for(lambda: (d := {x["dag_id"]: x for x in dep.api("GET", "/dags?limit=100", token)["dags"]})
                            .keys() >= set(LOCAL_DEPLOYMENT_DAGS) and d, 180, "the dag-processor to parse the DAGs")
        except BaseException:
            stack.close()  # a failed start leaves nothing running; the next test starts again
            raise
        self._paused = {d: dags[d]["is_paused"] for d in LOCAL_DEPLOYMENT_DAGS}
        self._stack = stack
        self.current = LocalDeployment(dep, token, url, relay, alerts, imap, folder / "dags")

    def _live(self, attr: str, first: MaildirServer) -> MaildirServer:
        return getattr(self.current, attr) if self.current else first

    def _reset(self) -> None:
        assert self.current
        dep = self.current.dep
        token = self.current.token = dep.token()
        dags = [d["dag_id"] for d in dep.api("GET", "/dags", token, params={"limit": 100})["dags"]]
        # Paused first (a DAG a test added, its team's, stays paused), so that no asset-triggered
        # run starts between the deletions; then every run deleted.
        for dag_id in dags:
            paused = self._paused.get(dag_id, True)
            if dep.api("GET", f"/dags/{dag_id}", token)["is_paused"] != paused:
                dep.api("PATCH", f"/dags/{dag_id}", token, json={"is_paused": paused})
        for dag_id in dags:
            for run in dep.api("GET", f"/dags/{dag_id}/dagRuns", token, params={"limit": 100})["dag_runs"]:
                dep.api("DELETE", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}", token)
        name = psycopg.conninfo.conninfo_to_dict(self.current.url)["dbname"]
        admin_execute(self._admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        clone_database(self._admin, name, self._template)
        for attr in ("relay", "alerts"):
            server = getattr(self.current, attr)
            _stop_quietly(server)
            empty_maildir(server.maildir)
            setattr(self.current, attr, _restarted(server))

    def stop(self) -> None:
        """Stop the deployment and the SMTP servers running then (checking that no process is
        left behind: :func:`running_deployment`), drop its outreach database."""
        if self._stack is not None:
            try:
                self._stack.close()
            finally:
                self._stack = self.current = None


def _stop_quietly(server: MaildirServer) -> None:
    with contextlib.suppress(AssertionError):  # aiosmtpd: "SMTP daemon not running"
        server.stop()


def _restarted(server: MaildirServer) -> MaildirServer:
    """A server like ``server`` (stopped), started on its port and Maildir."""
    return MaildirServer(server.maildir, port=server.port).start()


def shares_local_deployment(nodeid: str) -> bool:
    """Whether the test ``nodeid`` is in one of :data:`LOCAL_DEPLOYMENT_FILES`."""
    return nodeid.split("::", 1)[0] in LOCAL_DEPLOYMENT_FILES


_SHARED = pytest.StashKey[_SharedLocalDeployment]()


@pytest.fixture(scope="session")
def _shared_local_deployment(request, pg_admin_url: str, airflow_meta_template: str, template_db: str,
                             tmp_path_factory, dovecot):
    shared = _SharedLocalDeployment(pg_admin_url, airflow_meta_template, template_db,
                                    tmp_path_factory.mktemp("local-deployment"), dovecot)
    request.config.stash[_SHARED] = shared
    yield shared
    shared.stop()


@pytest.fixture
def local_deployment(_shared_local_deployment: _SharedLocalDeployment) -> LocalDeployment:
    """The deployment the tests of :data:`LOCAL_DEPLOYMENT_FILES` share (LocalExecutor,
    PostgreSQL metadata; api-server, scheduler, dag-processor, triggerer), reset for this test
    (:class:`_SharedLocalDeployment`). Its settings: :data:`BASE_ENV`, ``OUTREACH_PREFLIGHT=off``,
    one SMTP session a send task, the DAGs of :data:`LOCAL_DEPLOYMENT_DAGS`, alerts to
    ``support.alerts.OPS``, the demo inboxes on the session's Dovecot. A DAG file a test adds to
    ``dags_folder`` is parsed within ~10 s (the dag-processor's refresh) and stays."""
    return _shared_local_deployment.get()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared deployment once no test of :data:`LOCAL_DEPLOYMENT_FILES` comes next on
    this worker: left running, its daemons' loops cost CPU the rest of the session."""
    shared = item.config.stash.get(_SHARED, None)
    if shared is not None and shared.current is not None and (
            nextitem is None or not shares_local_deployment(nextitem.nodeid)):
        shared.stop()


def wait_for(predicate, timeout: float, what: str):
    """Poll ``predicate`` every half second until it returns something true (returned) or
    ``timeout`` seconds pass (AssertionError). Every wait of the acceptance tests is one of these:
    a two-second poll cost a second per wait on average."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def trigger(dep: Deployment, token: str, dag_id: str, conf: dict | None = None) -> str:
    """Trigger a run through the REST API; return its run id."""
    return dep.api("POST", f"/dags/{dag_id}/dagRuns", token,
                   json={"logical_date": None, "conf": conf or {}})["dag_run_id"]


def wait_run(dep: Deployment, token: str, dag_id: str, run_id: str, timeout: float = 300) -> dict:
    return wait_for(lambda: (r := dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}", token))["state"] in FINAL and r,
                    timeout, f"{dag_id} run {run_id}")


def run_and_wait(dep: Deployment, token: str, dag_id: str, timeout: float = 300) -> dict:
    return wait_run(dep, token, dag_id, trigger(dep, token, dag_id), timeout)


def task_instances(dep, token, dag_id, run_id) -> list[dict]:
    return dep.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", token)["task_instances"]


def wait_answerable(dep, token, dag_id: str, run_id: str, task_id: str, timeout: float = 240) -> None:
    """Wait until the run's ``task_id`` awaits input (a Required Action is open) *and* the scheduler
    has processed the executor's event for the worker that paused it (its ``TaskInstance Finished:
    … state=awaiting_input`` line in ``scheduler.log``).

    Why the second wait: an answer lands the task back in the queue under the same try number;
    if the scheduler sees the pausing worker's exit only after that, Airflow 3 (LocalExecutor)
    takes it for the resumed task's end, fails the try and the retry asks again (seen on 2 loaded
    cores 6 s after the pause). A person never answers that fast; a test must not either."""
    wait_for(lambda: any(t["task_id"] == task_id and t["state"] == "awaiting_input"
                         for t in task_instances(dep, token, dag_id, run_id)), timeout,
             f"{dag_id}.{task_id} to await input")
    head = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id}, "
    log = dep.log_dir / "scheduler.log"
    wait_for(lambda: any(head in line and "state=awaiting_input," in line
                         for line in log.read_text(errors="replace").splitlines()),
             timeout, f"the scheduler to see the worker that paused {dag_id}.{task_id} exit")


def clear_and_wait(dep, token, run_id: str, tis: list[dict], *, only_failed: bool) -> dict:
    """Clear send_batch task instances (and what follows them) through the REST API; wait for the
    run to finish again; return the run."""
    dep.api("POST", "/dags/outreach_send/clearTaskInstances", token, json={
        "dag_run_id": run_id, "task_ids": [["send_batch", t["map_index"]] for t in tis],
        "only_failed": only_failed, "dry_run": False, "reset_dag_runs": True, "include_downstream": True})

    def rerun_done():
        now = {(t["map_index"]): t for t in task_instances(dep, token, "outreach_send", run_id)
               if t["task_id"] == "send_batch"}
        if not all(now[t["map_index"]]["try_number"] > t["try_number"] for t in tis):
            return None
        run = dep.api("GET", f"/dags/outreach_send/dagRuns/{run_id}", token)
        return run if run["state"] in FINAL else None

    return wait_for(rerun_done, 300, "the cleared task instances to run again")


def send_tis(dep, token, run_id: str) -> list[dict]:
    return [t for t in task_instances(dep, token, "outreach_send", run_id) if t["task_id"] == "send_batch"]


def accepted_once(messages) -> None:
    ids = [m["Message-ID"] for m in messages]
    assert len(ids) == len(set(ids)), "a Message-ID was accepted twice"
