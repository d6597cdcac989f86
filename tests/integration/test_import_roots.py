"""Imports read only files inside OUTREACH_IMPORT_ROOTS (issue 12, item 2): the Airflow form and
the CLI take a path, and must neither read nor echo any other file the worker can reach."""

from __future__ import annotations

import os
import subprocess

import pytest
from airflow.sdk.exceptions import AirflowFailException

from outreach.leadfile import ImportFileError, import_path
from outreach.leads import import_leads
from outreach.settings import SettingsError, import_roots
from outreach.suppression import import_suppressions
from support.flow import cli_env, outreach_cmd, scalar
from support.paths import CAMPAIGN, MAILBOXES, ROOT

# The Airflow task turns an unusable file into AirflowFailException (no retry: the same file
# fails again), with the importer's message.
REFUSED = (ImportFileError, AirflowFailException)

SECRET = "root-password-hash:SECRET-LINE-1\nsecond:line\n"


@pytest.fixture
def outside(tmp_path):
    """A secret file outside the import folder, and the folder itself (the only root)."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    data = tmp_path / "data"
    data.mkdir()
    (data / "leads.csv").write_text("Email,First Name\nok@acme.example,Ok\n")
    return secret, data


def test_roots_default_to_include_data_and_take_commas_or_pathsep(tmp_path):
    assert import_roots({}) == ((ROOT / "include" / "data").resolve(),)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    both = (tmp_path / "a", tmp_path / "b")
    assert import_roots({"OUTREACH_IMPORT_ROOTS": f"{both[0]}, {both[1]}"}) == both
    assert import_roots({"OUTREACH_IMPORT_ROOTS": f"{both[0]}{os.pathsep}{both[1]}"}) == both
    with pytest.raises(SettingsError, match="OUTREACH_IMPORT_ROOTS: 'nowhere' is not a folder"):
        import_roots({"OUTREACH_IMPORT_ROOTS": "nowhere"})
    with pytest.raises(SettingsError, match="OUTREACH_IMPORT_ROOTS names no folder"):
        import_roots({"OUTREACH_IMPORT_ROOTS": " , "})


def test_paths_outside_the_roots_are_refused_after_resolving_dots_and_symlinks(outside):
    secret, data = outside
    (data / "link.csv").symlink_to(secret)
    roots = (data.resolve(),)
    assert import_path(data / "leads.csv", roots=roots) == (data / "leads.csv").resolve()
    assert import_path("leads.csv", base=data, roots=roots) == (data / "leads.csv").resolve()
    for path in (secret, data / ".." / "secret.txt", data / "link.csv", data / "missing" / ".." / ".." / "secret.txt"):
        with pytest.raises(ImportFileError, match="not inside an import folder") as exc:
            import_path(path, roots=roots)
        assert "SECRET" not in str(exc.value)


def test_import_functions_refuse_a_file_outside_the_roots(db_url, outside, monkeypatch):
    secret, data = outside
    monkeypatch.setenv("OUTREACH_IMPORT_ROOTS", str(data))
    with pytest.raises(ImportFileError, match="not inside an import folder"):
        import_leads(db_url, CAMPAIGN, MAILBOXES, secret)
    with pytest.raises(ImportFileError, match="not inside an import folder"):
        import_suppressions(db_url, secret)
    assert import_leads(db_url, CAMPAIGN, MAILBOXES, data / "leads.csv").imported == 1


def test_the_airflow_task_refuses_a_typed_path_outside_the_roots(db_url, outside, monkeypatch):
    from outreach.airflow import tasks_import

    secret, data = outside
    monkeypatch.setenv("OUTREACH_IMPORT_ROOTS", str(data))
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)  # a key=value conninfo is no Airflow URI
    with pytest.raises(REFUSED, match="not inside an import folder") as exc:
        tasks_import.import_task("include/campaigns/demo.yaml", "include/mailboxes.yaml",
                                 str(secret), None)
    assert "SECRET" not in str(exc.value)
    with pytest.raises(REFUSED, match="not inside an import folder"):
        tasks_import.import_task("include/campaigns/demo.yaml", "include/mailboxes.yaml",
                                 str(data / "leads.csv"), "include/data/../../../../../../etc/passwd")
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0


@pytest.mark.parametrize("command", [["import-leads", "--csv"], ["import-suppressions"]])
def test_cli_never_reads_or_echoes_a_file_outside_the_roots(db_url, sink, outside, tmp_path, command):
    secret, data = outside
    env = cli_env(db_url, sink, OUTREACH_IMPORT_ROOTS=str(data))
    p = subprocess.run(outreach_cmd(*command, str(secret)), env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1
    assert "not inside an import folder" in p.stderr and "OUTREACH_IMPORT_ROOTS" in p.stderr
    assert "SECRET" not in p.stdout + p.stderr and "second" not in p.stdout + p.stderr


def test_no_email_column_lists_a_few_cut_header_names_only(tmp_path):
    from outreach.leadcsv import open_leads_csv

    path = tmp_path / "wide.csv"
    path.write_text(",".join(["Name" + "x" * 100] + [f"c{i}" for i in range(30)]) + "\nA\n")
    with pytest.raises(ImportFileError) as exc:
        open_leads_csv(path)
    message = str(exc.value)
    assert "no email column" in message and "and 21 more" in message
    assert "x" * 50 not in message and "c29" not in message


def test_the_airflow_form_reads_campaign_and_mailbox_files_only_from_the_project(db_url, outside,
                                                                                monkeypatch):
    from outreach.airflow import tasks_import

    secret, data = outside
    monkeypatch.setenv("OUTREACH_IMPORT_ROOTS", str(data))
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)  # a key=value conninfo is no Airflow URI
    for campaign, mailboxes in ((str(secret), "include/mailboxes.yaml"),
                                ("include/campaigns/demo.yaml", "include/../../../../etc/passwd")):
        with pytest.raises(REFUSED, match="campaign and mailbox files live in") as exc:
            tasks_import.import_task(campaign, mailboxes, str(data / "leads.csv"), None)
        assert "SECRET" not in str(exc.value) and "root:" not in str(exc.value)
