"""The generated reference (``tools/docs_reference.py``) names every setting, every ``outreach``
command and every DAG, each found from its own source: the settings groups' fields, the argparse
parser, the DAG files as the DagBag loads them."""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from outreach import settings
from outreach.cli import build_parser
from support.paths import ROOT


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference = _load("docs_reference")


def every_setting() -> set[str]:
    """``OUTREACH_*`` of every field of every settings class in ``outreach.settings`` (found by
    walking the class tree, not by the generator's own list)."""
    found: set[str] = set()
    todo = [settings.OutreachSettings]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls is not settings.OutreachSettings and cls.__module__ == settings.__name__:
            found.update(f"OUTREACH_{field}".upper() for field in cls.model_fields)
    return found


def test_every_setting_is_in_the_settings_page():
    variables = every_setting()
    assert {"OUTREACH_BATCH_SIZE", "OUTREACH_SPAM_RATE_THRESHOLD", "OUTREACH_DATABASE_URL",
            "OUTREACH_ALERT_TO", "OUTREACH_QUEUE_DUE_WORKERS"} <= variables
    page = reference.settings_page()
    listed = set(re.findall(r"^\| `(OUTREACH_\w+)` \|", page, re.MULTILINE))
    assert variables - listed == set()


def test_the_variables_read_with_os_environ_are_in_the_settings_page():
    page = reference.settings_page()
    for variable in ("OUTREACH_IMPORT_ROOTS", "OUTREACH_WORKER_HOSTNAME", "OUTREACH_HOME"):
        assert variable in page


def every_command() -> set[str]:
    """``outreach a b`` for every sub-command of the parser (walked here, not by the generator)."""
    found: set[str] = set()

    def walk(parser, path):
        for action in parser._actions:
            choices = getattr(action, "choices", None)
            for name, sub in (choices.items() if isinstance(choices, dict) else ()):
                if hasattr(sub, "_actions"):
                    found.add(" ".join((*path, name)))
                    walk(sub, (*path, name))

    walk(build_parser(), ("outreach",))
    return found


def test_every_command_is_in_the_cli_page():
    names = every_command()
    assert {"outreach db upgrade", "outreach mailbox pause", "outreach send", "outreach demo"} <= names
    page = reference.cli_page()
    headed = set(re.findall(r"^#{2,4} (outreach[\w -]*?) \{#", page, re.MULTILINE))
    assert names - headed == set()


@pytest.fixture(scope="module")
def dag_facts():
    return reference.dag_facts()


def test_every_dag_file_loads_into_the_reference(dag_facts):
    assert dag_facts["errors"] == {}
    files = {p.name for p in (ROOT / "dags").glob("*.py")}
    loaded = {facts["file"].rsplit("/", 1)[-1] for facts in dag_facts["dags"].values()}
    assert files - loaded == set()


def test_every_dag_and_param_is_in_the_dags_page(dag_facts):
    page = reference.dags_page(dag_facts)
    assert {"outreach_send", "outreach_requeue"} <= set(dag_facts["dags"])
    assert dag_facts["dags"]["outreach_send"]["schedule"] == "*/10 * * * *"
    for dag_id, dag in dag_facts["dags"].items():
        assert f"\n## {dag_id} {{#{dag_id}}}\n" in page, dag_id
        section = page.split(f"\n## {dag_id} {{#{dag_id}}}\n", 1)[1].split("\n## ", 1)[0]
        for param in dag["params"]:
            assert f"| `{param}` |" in section, (dag_id, param)
        assert dag["schedule"] is None or str(dag["schedule"]) in section, dag_id


def test_the_schema_page_holds_every_line_of_the_file():
    page = reference.schema_page()
    missing = [line for line in (ROOT / "sql" / "schema.sql").read_text().splitlines()
               if line.strip() and not set(line) <= set("-= ") and line.removeprefix("-- ") not in page]
    assert missing == []
    assert "- table `outreach.emails`" in page and "- function `outreach.claim_emails_v1`" in page
