"""Shared fixtures: a real PostgreSQL (embedded pgserver unless OUTREACH_TEST_ADMIN_URL names a
server), one template database built by running every migration, a fresh database per test cloned
from it, and real aiosmtpd servers on loopback."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

from support.paths import ROOT, SMTP_CONN_IDS

# Airflow reads its configuration at import time: point it at a throw-away home first. Each
# process gets its own: a pytest-xdist worker inherits the controller's environment, and two
# workers writing one SQLite metadata database would lock each other out. A home set by the
# caller (not by an earlier conftest, which leaves its mark) is kept.
_OWN_HOME = "OUTREACH_TEST_OWN_AIRFLOW_HOME"
if os.environ.get(_OWN_HOME) and os.environ.get(_OWN_HOME) == os.environ.get("AIRFLOW_HOME"):
    for _inherited in ("AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        os.environ.pop(_inherited, None)
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = os.environ[_OWN_HOME] = tempfile.mkdtemp(prefix="outreach-test-airflow-")
_MADE_HOME = os.environ.get(_OWN_HOME) == os.environ["AIRFLOW_HOME"]  # removed in pytest_unconfigure
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                      f"sqlite:///{Path(os.environ['AIRFLOW_HOME']) / 'airflow.db'}")
# Tests import files they write into pytest's temporary folders; the product's default import
# folder stays allowed (tests of the rule itself set OUTREACH_IMPORT_ROOTS).
os.environ.setdefault("OUTREACH_IMPORT_ROOTS", os.pathsep.join(
    [str(ROOT / "include" / "data"), os.path.realpath(tempfile.gettempdir())]))
# No gap between a mailbox's handoffs unless a test asks for one (the gap is tested with an
# injected clock, tests/integration/test_pacing_days.py): a real 60-second wait per message would only slow
# the suite. CLI and Airflow subprocesses inherit it.
os.environ.setdefault("OUTREACH_SEND_GAP_SECONDS", "0")
# One name per pytest run, inherited by its xdist workers: what they build once (support.once).
os.environ.setdefault("OUTREACH_TEST_RUN", uuid.uuid4().hex[:12])

# Airflow configures logging when it is first imported, replacing the root logger's handlers. A
# test that reaches Airflow code lazily (the SMTP hook behind smtp_connector) would lose pytest's
# capture handler for its own phase (caplog sees nothing); imported here, before any test phase,
# the order is the same whichever tests run.
import airflow.sdk  # noqa: E402, F401
import psycopg  # noqa: E402 - after the environment above is set: Airflow reads it on import
import pytest  # noqa: E402 - after the environment above is set: Airflow reads it on import

from outreach.dev import embedded  # noqa: E402 - after the environment above is set: Airflow reads it on import
from outreach.dev.devsmtp import MaildirServer  # noqa: E402 - after the environment above is set: Airflow reads it on import
from outreach.migrate import upgrade  # noqa: E402 - after the environment above is set: Airflow reads it on import
from outreach.settings import Settings  # noqa: E402 - after the environment above is set: Airflow reads it on import

# Fixtures some tests need, kept with their helpers in tests/support (pytest plugins: no import in
# the test module, which would shadow the fixture's name with an unused import).
pytest_plugins = ["support.airflowhome", "support.browser", "support.deployment", "support.imapserver",
                  "support.signupapp", "support.sources", "support.warehouse"]

# The folder a test lives in says what it needs (README, "Tests"); its marker is the folder's name,
# so `-m "not acceptance"` or `-m unit` select by it from anywhere.
FOLDER_MARKERS = ("unit", "integration", "dags", "acceptance", "migration")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its folder under tests/ (one of FOLDER_MARKERS). A test using a
    module-scoped fixture (the Celery deployment, the OAuth IdP) joins its module's
    ``xdist_group``, so that ``--dist loadgroup`` too keeps the module on one worker, which builds
    the fixture once (``make test`` runs by file, ``--dist loadfile``: every module on one worker
    whatever its marks). The tests of ``support.deployment.LOCAL_DEPLOYMENT_FILES`` move next
    to each other, where the first of them was."""
    tests = Path(__file__).parent
    for item in items:
        folder = item.path.relative_to(tests).parts[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(folder)
        info = getattr(item, "_fixtureinfo", None)
        if info and any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.path.relative_to(tests).as_posix()))
    # The modules sharing a deployment one after the other (in one process, or on one worker:
    # pytest_xdist_make_scheduler), where the first of them is: it starts once.
    from support.deployment import shares_local_deployment

    shared = [i for i in items if shares_local_deployment(i.nodeid)]
    if shared:
        first = items.index(shared[0])
        rest = [i for i in items if i not in shared]
        items[:] = rest[:first] + shared + rest[first:]


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist: no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` (``make test``) with the modules of
    ``support.deployment.LOCAL_DEPLOYMENT_FILES`` as one unit, sent to one worker: their tests
    share one deployment, started once. Any other mode: pytest-xdist's own scheduler."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    from support.deployment import LOCAL_DEPLOYMENT_FILES, shares_local_deployment

    class OneUnitForTheSharedDeployment(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return LOCAL_DEPLOYMENT_FILES[0] if shares_local_deployment(nodeid) else super()._split_scope(nodeid)

    return OneUnitForTheSharedDeployment(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Each process removes the Airflow home it made (not atexit: an xdist worker ends with
    os._exit); the controller (not an xdist worker) also removes what the run built once
    (support.once)."""
    if _MADE_HOME:
        shutil.rmtree(os.environ["AIRFLOW_HOME"], ignore_errors=True)
    if not hasattr(config, "workerinput"):
        from support.once import run_folder

        shutil.rmtree(run_folder(), ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """Admin URL of the test server: OUTREACH_TEST_ADMIN_URL, else a fresh embedded pgserver."""
    url = os.environ.get("OUTREACH_TEST_ADMIN_URL")
    if url:
        yield url
        return
    from support.embeddedpg import embedded_server

    with embedded_server("outreach-test-pg-") as (admin_url, _):
        yield admin_url


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> str:
    """Name of a template database with every migration applied."""
    name = f"outreach_tpl_{os.getpid()}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(embedded.with_database(pg_admin_url, name))
    yield name
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(pg_admin_url: str, template_db: str) -> str:
    """URL of a fresh database cloned from the migrated template, dropped after the test."""
    from support.embeddedpg import clone_database

    name = f"outreach_t_{uuid.uuid4().hex[:12]}"
    clone_database(pg_admin_url, name, template_db)
    yield embedded.with_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def settings() -> Settings:
    """Sender settings for tests (a test-only secret). Pacing and the gap are off: these tests
    send a whole day's work at once; pacing has its own tests with a fixed clock
    (tests/integration/test_pacing.py, tests/integration/test_pacing_days.py)."""
    return Settings(public_url="https://unsubscribe.test.example",
                    unsubscribe_secret="test-secret-0123456789", batch_size=50, smtp_timeout=5,
                    send_interval_minutes=0, send_gap_seconds=0)


@pytest.fixture
def sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MaildirServer:
    """A real aiosmtpd server storing into a Maildir; every demo mailbox's Airflow SMTP
    connection points at it."""
    server = MaildirServer(tmp_path / "maildir").start()
    for conn_id in SMTP_CONN_IDS:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", server.connection_json())
    yield server
    server.stop()
