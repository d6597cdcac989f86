"""Which database a process uses, and the loud failure when none is configured.

An Airflow worker, the unsubscribe app and an ``outreach`` command on a server never get a fresh,
empty embedded PostgreSQL: without the connection ``outreach_db`` or ``OUTREACH_DATABASE_URL``
they fail with one line saying what to set. The embedded server is the launchers' (``make demo``,
``make airflow``) and the explicit opt-in ``OUTREACH_EMBEDDED_DB=1``'s. The Airflow task's
failure, under real Airflow: tests/dags/test_task_database.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from outreach.settings import NO_DATABASE
from support.flow import outreach_cmd
from support.paths import ROOT


def bare_env(tmp_path, **extra: str) -> dict[str, str]:
    """An environment with no outreach database configured, local state in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OUTREACH_DATABASE_URL", "AIRFLOW_CONN_OUTREACH_DB", "OUTREACH_EMBEDDED_DB")}
    env.update({"OUTREACH_HOME": str(ROOT), "OUTREACH_STATE_DIR": str(tmp_path / "state"),
                "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
                "OUTREACH_PUBLIC_URL": "https://unsubscribe.test.example",
                "OUTREACH_UNSUBSCRIBE_SECRET": "test-secret-0123456789"})
    env.update(extra)
    return env


def connection_json(url: str) -> str:
    """The Airflow connection (JSON form) of a libpq URL."""
    d = psycopg.conninfo.conninfo_to_dict(url)
    return json.dumps({"conn_type": "postgres", "host": d.get("host", "localhost"),
                       "port": int(d["port"]) if d.get("port") else None, "login": d.get("user"),
                       "password": d.get("password") or None, "schema": d["dbname"]})


def no_embedded_server_started(tmp_path) -> bool:
    return not (tmp_path / "state" / "pgdata").exists()


def test_cli_without_a_database_fails_with_one_line(tmp_path):
    p = subprocess.run(outreach_cmd("report"), env=bare_env(tmp_path), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [f"outreach: error: {NO_DATABASE}"]
    assert no_embedded_server_started(tmp_path)


def test_cli_refuses_an_unknown_opt_in_value(tmp_path):
    p = subprocess.run(outreach_cmd("report"), env=bare_env(tmp_path, OUTREACH_EMBEDDED_DB="maybe"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "OUTREACH_EMBEDDED_DB must be 1 or 0" in p.stderr
    assert no_embedded_server_started(tmp_path)


def test_cli_uses_the_outreach_db_connection_first(db_url, tmp_path):
    # OUTREACH_DATABASE_URL names a database that does not exist: the connection must win.
    wrong = psycopg.conninfo.make_conninfo(db_url, dbname="outreach_no_such_database")
    env = bare_env(tmp_path, OUTREACH_DATABASE_URL=wrong, AIRFLOW_CONN_OUTREACH_DB=connection_json(db_url))
    p = subprocess.run(outreach_cmd("db", "upgrade"), env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "database is up to date" in p.stdout


def test_the_airflow_wing_never_falls_back_to_the_embedded_server(tmp_path, monkeypatch):
    # Even with the developer's opt-in set: only the CLI's dev path may use the embedded server.
    from outreach.airflow.connections import database_url
    from outreach.settings import SettingsError

    for k in ("OUTREACH_DATABASE_URL", "AIRFLOW_CONN_OUTREACH_DB"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OUTREACH_EMBEDDED_DB", "1")
    monkeypatch.setenv("OUTREACH_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(SettingsError) as err:
        database_url()
    assert str(err.value) == NO_DATABASE
    assert no_embedded_server_started(tmp_path)


def test_doctor_reads_the_mailboxes_of_the_embedded_server_on_opt_in(tmp_path):
    # `outreach doctor` takes its database like every other command: with the opt-in and no
    # configured database, the embedded server's mailboxes, not "no outreach database".
    env = bare_env(tmp_path, OUTREACH_EMBEDDED_DB="1")
    try:
        up = subprocess.run(outreach_cmd("db", "upgrade"), env=env, capture_output=True,
                            text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        p = subprocess.run(outreach_cmd("doctor", "--workers", "1"), env=env,
                           capture_output=True, text=True, timeout=300)
        assert "no outreach database" not in p.stdout, p.stdout + p.stderr
        assert p.returncode in (0, 1) and "mailbox" in p.stdout, p.stdout + p.stderr
    finally:
        subprocess.run(outreach_cmd("db", "stop"), env=env, capture_output=True, timeout=120)


LOCAL_BACKEND = "airflow.secrets.local_filesystem.LocalFilesystemBackend"


@pytest.mark.parametrize("where", ["secrets section", "workers section", "workers env",
                                   "empty AIRFLOW_HOME", "AIRFLOW_CONFIG with $VAR"])
def test_cli_asks_a_configured_secrets_backend_before_the_environment(db_url, tmp_path, where):
    # The CLI skips importing Airflow only where Airflow could find no `outreach_db` anyway. A
    # secrets backend (here the local-file one, a real Airflow backend) named wherever Airflow
    # reads it can hold it: the command must then use that connection, not OUTREACH_DATABASE_URL.
    wrong = psycopg.conninfo.make_conninfo(db_url, dbname="outreach_no_such_database")
    conns = tmp_path / "connections.json"
    conns.write_text(json.dumps({"outreach_db": json.loads(connection_json(db_url))}))
    kwargs = json.dumps({"connections_file_path": str(conns)})
    section, key = ("workers", "secrets_backend") if where == "workers section" else ("secrets", "backend")
    cfg = f"[{section}]\n{key} = {LOCAL_BACKEND}\n{key}_kwargs = {kwargs}\n"
    home, cwd = tmp_path / "airflow-home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = bare_env(tmp_path, OUTREACH_DATABASE_URL=wrong)
    if where == "workers env":
        env.update(AIRFLOW__WORKERS__SECRETS_BACKEND=LOCAL_BACKEND,
                   AIRFLOW__WORKERS__SECRETS_BACKEND_KWARGS=kwargs)
    elif where == "empty AIRFLOW_HOME":  # Airflow reads ./airflow.cfg
        (cwd / "airflow.cfg").write_text(cfg)
        env["AIRFLOW_HOME"] = ""
    elif where == "AIRFLOW_CONFIG with $VAR":
        (cwd / "my.cfg").write_text(cfg)
        env.update(MY_CFG_DIR=str(cwd), AIRFLOW_CONFIG="$MY_CFG_DIR/my.cfg")
    else:
        (home / "airflow.cfg").write_text(cfg)
    p = subprocess.run(outreach_cmd("db", "upgrade"), env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "database is up to date" in p.stdout


def test_cli_on_outreach_database_url_alone_imports_no_airflow(db_url, tmp_path):
    # Nothing could define `outreach_db` here (no task, no AIRFLOW_CONN_OUTREACH_DB, no secrets
    # backend): the URL comes straight from OUTREACH_DATABASE_URL, without ~1 s of Airflow import.
    code = ("import sys; from outreach.cli.common import database_url; "
            "print(database_url()); print(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow'))")
    p = subprocess.run([sys.executable, "-c", code], env=bare_env(tmp_path, OUTREACH_DATABASE_URL=db_url),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [db_url, "[]"]
    with_backend = bare_env(tmp_path, OUTREACH_DATABASE_URL=db_url,
                            AIRFLOW__SECRETS__BACKEND="airflow.secrets.local_filesystem.LocalFilesystemBackend")
    p = subprocess.run([sys.executable, "-c", code], env=with_backend, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == db_url and p.stdout.splitlines()[1] != "[]"
