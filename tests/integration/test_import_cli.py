"""`outreach import-leads` as a user runs it (issue 12, item 10): paths from the current directory,
a non-zero exit when nothing was imported, the summary last, a progress line on long imports (by
rows, so no timing is needed), and `outreach import show RUN_ID --problems` paging stored problems."""

from __future__ import annotations

import logging
import subprocess

import pytest

from outreach.leadfile import ImportFileError
from support.flow import cli_env, outreach_cmd, scalar


def run(cmd: list[str], env: dict, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(outreach_cmd(*cmd), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    return folder


def test_relative_paths_are_relative_to_the_current_directory(db_url, sink, tmp_path, data):
    (data / "leads.csv").write_text("Email,First Name\nok@acme.example,Ok\n")
    env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(data))
    p = run(["import-leads", "--csv", "leads.csv"], env, cwd=data)
    assert p.returncode == 0, p.stderr
    assert "imported=1" in p.stdout.splitlines()[-1]
    assert scalar(db_url, "SELECT email FROM outreach.leads") == "ok@acme.example"


def test_problems_first_summary_last_and_a_progress_line_every_n_rows(db_url, sink, tmp_path, data):
    lines = [f"ok{i}@acme.example,Ok" for i in range(5)] + ["broken@,Bad"]
    (data / "leads.csv").write_text("Email,First Name\n" + "\n".join(lines) + "\n")
    env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(data))
    p = run(["import-leads", "--csv", "leads.csv", "--progress-every", "2"], env, cwd=data)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[0].startswith("  leads.csv, line 7, field email: invalid address")
    assert out[-1].startswith("import ") and "rows=6 imported=5" in out[-1] and "(run " in out[-1]
    progress = [line for line in p.stderr.splitlines() if "rows read" in line]
    assert [line.split(": ")[1].split(" rows")[0] for line in progress] == ["2", "4", "6"]
    assert all("rows/s" in line for line in progress)


def test_nothing_imported_exits_non_zero_and_the_problems_are_stored(db_url, sink, tmp_path, data):
    (data / "bad.csv").write_text("Email,First Name\nbroken@,A\n,B\nnot-an-address,C\n")
    env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(data))
    p = run(["import-leads", "--csv", "bad.csv"], env, cwd=data)
    assert p.returncode == 1
    assert "outreach: error: nothing imported: all 3 rows of" in p.stderr
    assert "rows=3 imported=0" in p.stdout.splitlines()[-1]
    (data / "empty.csv").write_text("Email,First Name\n")
    p = run(["import-leads", "--csv", "empty.csv"], env, cwd=data)
    assert p.returncode == 1 and "has no data rows" in p.stderr
    # A re-import of a good file that changes nothing is not "nothing imported".
    (data / "good.csv").write_text("Email\nok@acme.example\n")
    assert run(["import-leads", "--csv", "good.csv"], env, cwd=data).returncode == 0
    assert run(["import-leads", "--csv", "good.csv"], env, cwd=data).returncode == 0


def test_import_show_pages_the_stored_problems(db_url, sink, tmp_path, data):
    bad = [f"bad{i}@,X" for i in range(7)]
    (data / "leads.csv").write_text("Email,First Name\nok@acme.example,Ok\n" + "\n".join(bad) + "\n")
    env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(data))
    assert run(["import-leads", "--csv", "leads.csv"], env, cwd=data).returncode == 0
    run_id = scalar(db_url, "SELECT max(id) FROM outreach.import_runs")
    p = run(["import", "show", str(run_id)], env, cwd=data)
    assert p.returncode == 0 and "rows=8 imported=1" in p.stdout and "7 stored" in p.stdout
    p = run(["import", "show", str(run_id), "--problems", "--page-size", "3", "--page", "2"], env, cwd=data)
    assert p.returncode == 0, p.stderr
    listed = [line for line in p.stdout.splitlines() if line.startswith("  line ")]
    assert [line.split(",")[0] for line in listed] == ["  line 6", "  line 7", "  line 8"]
    assert f"problems 4–6 of 7 (page 2 of 3; next: outreach import show {run_id} --problems --page 3)" in p.stdout
    p = run(["import", "show", str(run_id), "--problems", "--page-size", "3", "--page", "3"], env, cwd=data)
    assert [line for line in p.stdout.splitlines() if line.startswith("  line ")] == [
        "  line 9, field email: invalid address: There must be something after the @-sign. (row skipped)"]
    p = run(["import", "show", "999999"], env, cwd=data)
    assert p.returncode == 1 and "no import run 999999" in p.stderr


def test_the_airflow_task_logs_progress_and_the_summary_last_and_fails_on_nothing_imported(
        db_url, data, monkeypatch, caplog, capsys):
    from outreach import leads
    from outreach.airflow import tasks_common, tasks_import

    for tasks in (tasks_import, tasks_common):  # the import, and the config check it runs first
        monkeypatch.setattr(tasks, "database_url", lambda: db_url)  # the outreach_db connection
    monkeypatch.setattr(leads, "PROGRESS_ROWS", 2)
    (data / "leads.csv").write_text("Email\n" + "".join(f"ok{i}@acme.example\n" for i in range(4)))
    with caplog.at_level(logging.INFO, logger="outreach"):
        out = tasks_import.import_task("include/campaigns/demo.yaml", "include/mailboxes.yaml",
                                       str(data / "leads.csv"), None)
    assert out["leads"]["imported"] == 4
    messages = [r.getMessage() for r in caplog.records if r.name == "outreach"]
    if not any("rows read" in m for m in messages):
        # Once Airflow's logging is configured (structlog), the task log goes to stdout instead
        # of through the root logger that caplog listens on: read the same lines there.
        messages = [line.split("] ", 1)[1].rsplit(" [outreach]", 1)[0]
                    for line in capsys.readouterr().out.splitlines() if "[outreach]" in line]
    assert [m.split(": ")[1].split(" (")[0] for m in messages if "rows read" in m] == [
        "2 rows read", "4 rows read"]
    assert messages[-1].startswith("import ") and "imported=4" in messages[-1]
    (data / "bad.csv").write_text("Email\nbroken@\n")
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises((ImportFileError, AirflowFailException), match="nothing imported: all 1 rows"):
        tasks_import.import_task("include/campaigns/demo.yaml", "include/mailboxes.yaml",
                                 str(data / "bad.csv"), None)
    assert scalar(db_url, "SELECT count(*) FROM outreach.import_runs") == 2
