"""docker-compose.yaml validates (Debian's ``docker-compose config``: no Docker engine needed) and
runs what the process deployment runs (``outreach.dev.deploy``: SERVICES, WORKER, init_commands,
shared_settings), which tests/acceptance/test_celery.py runs for real; the image extends the Airflow that
requirements.txt pins."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from outreach.dev.deploy import SERVICES, WORKER, init_commands, shared_settings
from support.paths import ROOT

SECRETS = {"POSTGRES_PASSWORD": "pg-test-pw", "OUTREACH_DB_PASSWORD": "outreach-test-pw",
           "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-test-secret-0123456789",
           "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789",
           "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
           "OUTREACH_ADMIN_PASSWORD": "admin-test-pw"}
AIRFLOW_SERVICES = {*SERVICES, WORKER[0], "airflow-init"}


def compose_config(**env: str) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed: apt-get install docker-compose "
                    "(`make test` installs it when missing: make compose-tool)")
    full = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("AIRFLOW_CONN_")}
    full.update({"OUTREACH_ENV_FILE": ".env.example", **env})
    return subprocess.run([exe, "--project-directory", str(ROOT), "-f", str(ROOT / "docker-compose.yaml"),
                           "--env-file", str(ROOT / ".env.example"), "config"],
                          env=full, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def config() -> dict:
    p = compose_config(**SECRETS, AIRFLOW_UID="4242")
    assert p.returncode == 0, p.stderr
    return yaml.safe_load(p.stdout)


def test_the_file_validates_with_the_official_layout(config):
    assert set(config["services"]) == AIRFLOW_SERVICES | {"postgres", "redis", "mailpit",
                                                          "airflow-cli", "flower"}
    # The official file's optional services, behind their profiles.
    assert config["services"]["airflow-cli"]["profiles"] == ["debug"]
    assert config["services"]["flower"]["profiles"] == ["flower"]
    assert config["services"]["flower"]["command"] in ("celery flower", ["celery", "flower"])
    # Ownership of the mounted logs goes to AIRFLOW_UID before anything writes there.
    init = config["services"]["airflow-init"]["command"][-1]
    assert 'chown -R "4242:0" /opt/airflow/logs' in init, init
    assert config["services"]["airflow-worker"]["user"] == "4242:0"
    assert config["services"]["mailpit"]["image"].startswith("axllent/mailpit")
    assert "postgres-db-volume" in config["volumes"]


def test_services_run_the_process_deployments_commands(config):
    services = config["services"]
    for name, cmd in {**SERVICES, WORKER[0]: WORKER[1]}.items():
        command = services[name]["command"]
        assert (shlex.split(command) if isinstance(command, str) else command) == list(cmd), name
    script = services["airflow-init"]["command"][-1]
    lines = [shlex.split(line) for line in script.splitlines() if line.strip()]
    for step in init_commands(4):  # OUTREACH_SMTP_POOL_SLOTS is unset: the default 4
        assert list(step) in lines, f"airflow-init does not run {' '.join(step)}"
    images = {services[s]["image"] for s in AIRFLOW_SERVICES}
    assert len(images) == 1 and all(services[s]["build"] for s in AIRFLOW_SERVICES)


def test_services_have_the_process_deployments_settings(config):
    expected = shared_settings("CeleryExecutor")
    for name in AIRFLOW_SERVICES:
        env = {k: str(v) for k, v in config["services"][name]["environment"].items()}
        assert {k: env.get(k) for k in expected} == expected, name
        # What the process deployment sets to this machine's addresses, the compose file sets to
        # the services'; the outreach database is the Airflow connection outreach_db.
        for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__BROKER_URL",
                    "AIRFLOW__CELERY__RESULT_BACKEND", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                    "AIRFLOW__API_AUTH__JWT_SECRET", "OUTREACH_SMTP_POOL_SLOTS",
                    "OUTREACH_UNSUBSCRIBE_SECRET", "OUTREACH_PUBLIC_URL"):
            assert env.get(key), f"{name}: {key} is not set"
        assert env["AIRFLOW_CONN_OUTREACH_DB"] == "postgresql://outreach:outreach-test-pw@postgres:5432/outreach"
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis:") or \
            env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://:@redis:")
        for conn in ("ANNA", "BEN", "HELLO"):  # every demo mailbox reaches Mailpit by default
            assert env[f"AIRFLOW_CONN_OUTREACH_SMTP_{conn}"].startswith("smtp://mailpit:1025/")
        # The admin's first password is the one-off init's only (outreach roles sync).
        assert (env.get("OUTREACH_ADMIN_PASSWORD") == "admin-test-pw") == (name == "airflow-init"), name


def test_capacity_follows_the_sizing_rule_for_its_defaults(config):
    """The compose file's capacity settings are the rule's numbers (outreach.sizing) for the
    layout it documents: 4 mailboxes, 2 workers; the same as `make airflow EXECUTOR=celery`."""
    from outreach.sizing import DEFAULT_MAILBOXES, Sizing

    expected = Sizing(DEFAULT_MAILBOXES, workers=2).environment("CeleryExecutor")
    for name in AIRFLOW_SERVICES:
        env = {k: str(v) for k, v in config["services"][name]["environment"].items()}
        assert {k: env.get(k) for k in expected} == expected, name


def test_a_missing_secret_stops_compose_with_its_name():
    p = compose_config(**{k: v for k, v in SECRETS.items() if k != "OUTREACH_UNSUBSCRIBE_SECRET"})
    assert p.returncode != 0
    assert "set OUTREACH_UNSUBSCRIBE_SECRET in .env" in p.stderr


def test_the_image_extends_the_pinned_airflow():
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM apache/airflow:(\S+)-python3\.11$", dockerfile, re.M)
    pinned = re.search(r"^apache-airflow==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert base and pinned and base.group(1) == pinned.group(1) == "3.3.2"
    assert "-r /opt/outreach/requirements-image.txt" in dockerfile
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in dockerfile  # pip never moves Airflow
    assert "ARG AIRFLOW_VERSION=3.3.2" in dockerfile
    assert dockerfile.count("&& pip check") == 2  # after each install step
    assert "providers-celery" in (ROOT / "requirements.txt").read_text()
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".env" in ignored and ".git" in ignored  # secrets and history never enter the image
    assert "logs" in ignored  # the services' own logs (mounted) never enter the build context


def _pins(path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.strip().split("==")
            out[re.sub(r"[-_.]+", "-", name).lower()] = version
    return out


def test_the_image_installs_the_runtime_pins_without_test_or_lint_tools():
    """deploy/requirements-image.txt: requirements.txt's pins (the same versions), none of the
    test and lint tools, and every runtime dependency of what it lists (read from this venv's
    installed metadata, which requirements.txt produced), so the image resolves to the tested set."""
    from importlib.metadata import distribution

    from packaging.requirements import Requirement

    image, full = _pins(ROOT / "deploy" / "requirements-image.txt"), _pins(ROOT / "requirements.txt")
    assert image and all(full.get(k) == v for k, v in image.items()), \
        {k: (v, full.get(k)) for k, v in image.items() if full.get(k) != v}
    assert image["apache-airflow"] == "3.3.2"
    for tool in ("pytest", "pytest-timeout", "mypy", "ruff", "pre-commit", "selenium", "pgserver"):
        assert tool not in image, f"{tool} is a test or lint tool: not in the image"
    missing = set()
    for name in image:
        for req in distribution(name).requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                key = re.sub(r"[-_.]+", "-", r.name).lower()
                if key not in image and key in full:
                    missing.add(f"{key} (needed by {name})")
    assert not missing, sorted(missing)
