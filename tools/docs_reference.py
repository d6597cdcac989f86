"""The reference pages of the documentation site, generated from the code when the site is built.

Four pages, each from the one place that knows it, so none is written (or goes stale) by hand:

* ``reference/settings.md`` — every ``OUTREACH_*`` setting: each settings group of
  ``plugins/outreach/settings.py`` (every :class:`outreach.settings.OutreachSettings` subclass
  defined there), its fields with type, default and what is allowed (the field's description,
  which is also the error a wrong value gets), then the variables read with ``os.environ``
  (the module docstring's table);
* ``reference/cli.md`` — every ``outreach`` command: the argparse parser of
  :func:`outreach.cli.build_parser`, walked down every sub-command, each with its ``--help``;
* ``reference/dags.md`` — every DAG the DagBag loads from ``dags/``: schedule, tags, Params (type,
  default, description) and its ``doc_md``; parsed in a child process with schedules on and no
  database or network, as the DAG processor parses them;
* ``reference/schema.md`` — ``sql/schema.sql``: its header (where each rule lives), its sections
  and objects, and the file itself.

``tools/mkdocs_hooks.py`` adds them to the site as generated files (nothing is written into
``docs/``); ``tests/unit/test_docs_reference.py`` fails when a setting, command or DAG is missing.
``python tools/docs_reference.py OUT_DIR`` writes the four files, to read them without a build.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GENERATED_NOTE = ("*Generated from the code when the site is built ({source}); do not edit — "
                  "change the code and its docstrings.*\n")


def _cell(text: object) -> str:
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def rst_to_markdown(text: str) -> str:
    """The reST of docstrings as Markdown: ``:func:`x```/``:class:`x``` → `` `x` ``,
    double backquotes → single ones."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _first_paragraph(doc: str | None) -> str:
    return rst_to_markdown(inspect.cleandoc(doc or "").split("\n\n")[0].replace("\n", " "))


# --- settings ----------------------------------------------------------------------------------

def settings_groups() -> list[type[Any]]:
    """Every settings group defined in :mod:`outreach.settings`, in the file's order."""
    from outreach import settings

    found = [obj for obj in vars(settings).values()
             if inspect.isclass(obj) and issubclass(obj, settings.OutreachSettings)
             and obj is not settings.OutreachSettings and obj.__module__ == settings.__name__]
    return sorted(found, key=lambda cls: inspect.getsourcelines(cls)[1])


def setting_variable(cls: type[Any], field: str) -> str:
    """The environment variable of a field: ``OUTREACH_`` + the field name, upper case."""
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def _default(info: Any) -> str:
    from pydantic_core import PydanticUndefined

    if info.default_factory is not None:
        return _cell(repr(info.default_factory()))
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    value = info.default
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        value = ",".join(map(str, value))
    return f"`{_cell(value)}`"


def _type_name(annotation: Any) -> str:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"typing\.|datetime\.", "", text)
    while (start := text.find("Annotated[")) >= 0:  # a nested Annotated[x, FieldInfo(…)] → x
        depth, first, end = 0, None, len(text)
        for i in range(start + len("Annotated["), len(text)):
            if text[i] in "[(":
                depth += 1
            elif text[i] in "])":
                if depth == 0:
                    end = i
                    break
                depth -= 1
            elif text[i] == "," and depth == 0 and first is None:
                first = i
        text = text[:start] + text[start + len("Annotated["):first or end] + text[end + 1:]
    return _cell(text)


def environ_settings() -> list[tuple[str, str, str]]:
    """The module docstring's table rows that no settings group reads: ``(variable, where,
    allowed)`` for the variables read with ``os.environ`` (paths, the worker hostname, the
    import roots)."""
    from outreach import settings

    names = {cls.__name__ for cls in settings_groups()}
    rows = []
    for line in (settings.__doc__ or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("OUTREACH_") or cells[1] in names:
            continue
        if cells[1].startswith(":class:"):
            continue  # a group documented elsewhere: listed with its fields above
        rows.append((cells[0], rst_to_markdown(cells[1]), rst_to_markdown(cells[2])))
    return rows


def other_variables() -> dict[str, list[str]]:
    """``{variable: files}`` for every ``"OUTREACH_…"`` string literal in ``plugins/`` and
    ``dags/`` that neither a settings group nor the module docstring's table covers (development
    switches, the SMTP pool's size, failpoints)."""
    known = {setting_variable(cls, f) for cls in settings_groups() for f in cls.model_fields}
    for variable, _, _ in environ_settings():
        known.update(v.strip() for v in variable.split(","))
    found: dict[str, set[str]] = {}
    for folder in ("plugins", "dags"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in re.findall(r"[\"'](OUTREACH_[A-Z0-9_]+)[\"']", path.read_text()):
                if name not in known:
                    found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return {name: sorted(files) for name, files in sorted(found.items())}


def settings_page() -> str:
    """``reference/settings.md``: every settings group with every field, then the variables read
    with ``os.environ``."""
    from outreach import settings

    out = ["# Settings\n\n", GENERATED_NOTE.format(source="`plugins/outreach/settings.py`"),
           textwrap.dedent("""
           Every `OUTREACH_*` setting is read once, with its range, by one settings group (a
           pydantic-settings class). A value out of range, not a number, `inf`/`nan` or missing is
           refused before anything runs, with one line naming the variable and what it may be (the
           *allowed* column): `outreach` exits 2, an Airflow task fails with the same line.
           Connections and secrets outside these groups: [Configuration](configuration.md).
           """)]
    for cls in settings_groups():
        out.append(f"\n## {cls.__name__}\n\n{_first_paragraph(cls.__doc__)}\n\n")
        out.append("| variable | type | default | allowed |\n|---|---|---|---|\n")
        for field, info in cls.model_fields.items():
            default = "*(secret)*" if field in cls.SECRET_FIELDS and info.default else _default(info)
            out.append(f"| `{setting_variable(cls, field)}` | {_type_name(info.annotation)} | "
                       f"{default} | {_cell(info.description or '')} |\n")
    out.append("\n## Read with `os.environ`\n\n"
               f"{_first_paragraph(settings.__doc__.split('|')[-1] if settings.__doc__ else '')}\n\n"
               "| variable | read by | allowed (default) |\n|---|---|---|\n")
    for variable, where, allowed in environ_settings():
        out.append(f"| {_cell(variable)} | {_cell(where)} | {_cell(allowed)} |\n")
    others = other_variables()
    if others:
        out.append("\n## Other variables the code reads\n\nDevelopment and deployment switches "
                   "read where they are used (see the module named for what each does).\n\n"
                   "| variable | read in |\n|---|---|\n")
        for name, files in others.items():
            out.append(f"| `{name}` | {', '.join(f'`{f}`' for f in files)} |\n")
    return "".join(out)


# --- the command line --------------------------------------------------------------------------

def commands(parser: argparse.ArgumentParser | None = None,
             path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Yield ``(command path, parser, one-line help)`` for every sub-command, depth first, in the
    order ``--help`` lists them (``("db", "upgrade")`` for ``outreach db upgrade``)."""
    from outreach.cli import build_parser

    parser = parser or build_parser()
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            yield (*path, name), sub, helps.get(name, "")
            yield from commands(sub, (*path, name))


def cli_page() -> str:
    """``reference/cli.md``: every command with its one-line help and its ``--help``."""
    from outreach.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the same page everywhere
    top = build_parser()
    out = ["# The `outreach` command\n\n", GENERATED_NOTE.format(
        source="the argparse parser of `plugins/outreach/cli/`"),
        "\nThe DAGs call the same functions. At a glance, with examples: "
        "[the command line](command-line.md).\n\n"
        "| command | what it does |\n|---|---|\n"]
    listed = list(commands(top))
    for path, _, help_ in listed:
        out.append(f"| [`outreach {' '.join(path)}`](#{'-'.join(('outreach', *path))}) | "
                   f"{_cell(help_)} |\n")
    out.append(f"\n## outreach\n\n```text\n{top.format_help().rstrip()}\n```\n")
    for path, sub, help_ in listed:
        level = "#" * min(2 + len(path) - 1, 4)
        anchor = "-".join(("outreach", *path))
        out.append(f"\n#{level} outreach {' '.join(path)} {{#{anchor}}}\n\n"
                   f"{help_}\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    return "".join(out)


# --- the DAGs ----------------------------------------------------------------------------------

DAG_PROBE = r"""
import json, re, socket, sys
def refuse(*a, **k):
    raise RuntimeError("network or database access at DAG parse time")
socket.socket.connect = refuse
socket.create_connection = refuse
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in sorted(bag.dags.items()):
    params = {}
    for key in dag.params:
        p = dag.params.get_param(key)
        params[key] = {"default": p.value if p.has_value else None, "description": p.description,
                       "schema": {k: v for k, v in p.schema.items() if k != "description"}}
    tt = dag.timetable
    assets, cond = [], getattr(tt, "asset_condition", None)
    if cond is not None:
        try:
            assets = sorted({a.uri for _, a in cond.iter_assets()})
        except Exception:  # an SDK condition: the URIs its repr names
            assets = sorted(set(re.findall(r"uri='([^']+)'", repr(cond)))) or [repr(cond)]
    out["dags"][dag_id] = {
        "assets": assets,
        "file": dag.fileloc, "doc_md": dag.doc_md or "", "tags": sorted(dag.tags),
        "schedule": getattr(tt, "expression", None) or getattr(tt, "summary", None),
        "schedule_description": getattr(tt, "description", "") or "",
        "timetable": type(tt).__name__, "params": params,
        "tasks": [t.task_id for t in dag.tasks],
    }
print("RESULT " + json.dumps(out, default=str))
"""


def dag_facts() -> dict[str, Any]:
    """Parse ``dags/`` with the DagBag in a child process (its own throw-away ``AIRFLOW_HOME``,
    schedules on, no database or network) and return ``{"errors": {file: error}, "dags":
    {dag_id: {file, doc_md, tags, schedule, schedule_description, timetable, assets, params,
    tasks}}}`` (``assets``: the URIs an asset-triggered schedule waits for).

    :raises RuntimeError: the child printed no result (its output is in the message).
    """
    with tempfile.TemporaryDirectory(prefix="outreach-docs-airflow-") as home:
        env = {**os.environ, "AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
               "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
               "OUTREACH_SCHEDULES": "on", "OUTREACH_DATABASE_URL": "postgresql:///none?host=/nonexistent"}
        proc = subprocess.run([sys.executable, "-c", DAG_PROBE, str(ROOT / "dags")], env=env,
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError("the DagBag probe printed no result:\n" + proc.stdout[-2000:] + proc.stderr[-4000:])
    facts: dict[str, Any] = json.loads(line[len("RESULT "):])
    return facts


def _param_type(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if "enum" in schema:
        text += ": " + ", ".join(f"`{v}`" for v in schema["enum"])
    if "format" in schema:
        text += f" ({schema['format']})"
    return _cell(text)


def _schedule(dag: dict[str, Any]) -> str:
    if dag["schedule"]:
        return f"`{dag['schedule']}`"
    if dag["assets"]:
        return "when an asset is updated: " + ", ".join(f"`{a}`" for a in dag["assets"])
    return "manual"


def _doc_under(markdown: str, dag_id: str) -> str:
    """A DAG's ``doc_md`` under the page's ``## dag_id``: a first heading that names the DAG is
    dropped (the page's heading says it), the others start at ``###``."""
    lines = inspect.cleandoc(markdown).splitlines()
    if lines and lines[0].startswith("#") and dag_id in lines[0]:
        lines = lines[1:]
    text = "\n".join(lines).strip()
    levels = [len(m) for m in re.findall(r"(?m)^(#{1,6}) ", text)]
    shift = 3 - min(levels) if levels else 0
    return re.sub(r"(?m)^(#{1,6}) ", lambda m: "#" * max(1, min(len(m.group(1)) + shift, 6)) + " ", text)


def dags_page(facts: dict[str, Any] | None = None) -> str:
    """``reference/dags.md``: every DAG with its schedule, tags, Params and documentation."""
    facts = facts if facts is not None else dag_facts()
    if facts["errors"]:
        raise RuntimeError(f"DAG import errors: {facts['errors']}")
    dags = facts["dags"]
    out = ["# DAGs\n\n", GENERATED_NOTE.format(source="the DagBag of `dags/`, schedules on"),
           "\nEvery DAG carries the tag `outreach` (operator DAGs also `operator`). With "
           "`OUTREACH_SCHEDULES=off` none is scheduled: each runs only when triggered.\n\n"
           "| DAG | schedule | file |\n|---|---|---|\n"]
    for dag_id, dag in dags.items():
        out.append(f"| [`{dag_id}`](#{dag_id}) | {_cell(_schedule(dag))} | "
                   f"`dags/{Path(dag['file']).name}` |\n")
    for dag_id, dag in dags.items():
        out.append(f"\n## {dag_id} {{#{dag_id}}}\n\n")
        schedule = _schedule(dag).replace("manual", "none: triggered by hand (or by the REST API)")
        out.append(f"- **Schedule:** {schedule}")
        if dag["schedule_description"] and dag["schedule_description"] != dag["schedule"]:
            out.append(f" — {_cell(dag['schedule_description'])}")
        out.append(f" (`{dag['timetable']}`)\n- **Tags:** {', '.join(dag['tags'])}\n"
                   f"- **Tasks:** {', '.join(f'`{t}`' for t in dag['tasks'])}\n"
                   f"- **File:** `dags/{Path(dag['file']).name}`\n")
        if dag["params"]:
            out.append("\n**Params** (the trigger form):\n\n"
                       "| param | title | type | default | description |\n|---|---|---|---|---|\n")
            for name, p in dag["params"].items():
                default = "" if p["default"] is None else f"`{_cell(json.dumps(p['default']))}`"
                out.append(f"| `{name}` | {_cell(p['schema'].get('title', ''))} | "
                           f"{_param_type(p['schema'])} | {default} | {_cell(p['description'] or '')} |\n")
        doc = _doc_under(dag["doc_md"], dag_id)
        if doc:
            out.append(f"\n{doc}\n")
    return "".join(out)


# --- the schema --------------------------------------------------------------------------------

_OBJECT = re.compile(r"^CREATE (?:OR REPLACE )?(TABLE|TYPE|FUNCTION|TRIGGER|(?:UNIQUE )?INDEX|VIEW|SCHEMA)"
                     r"\s+(?:IF NOT EXISTS\s+)?([\w.\"]+)", re.IGNORECASE)
_SECTION = re.compile(r"^-- (\d+)\. (.+)$")
_BANNER = re.compile(r"^-- =+$")


def schema_page(path: Path = ROOT / "sql" / "schema.sql") -> str:
    """``reference/schema.md``: the header of ``sql/schema.sql`` (where each rule lives), then
    each of its sections: the objects it creates, and its SQL as written."""
    sql = path.read_text()
    lines = sql.splitlines()
    header = []
    for line in lines:
        if not line.startswith("--"):
            break
        header.append(line[3:] if line.startswith("-- ") else line[2:])
    sections: list[tuple[str, list[tuple[str, str]], list[str]]] = []
    for number, line in enumerate(lines):
        if number < len(header):
            continue
        if m := _SECTION.match(line):
            sections.append((f"{m.group(1)}. {m.group(2).strip()}", [], []))
            continue
        if not sections or _BANNER.match(line):  # the ==== lines around a section's title
            continue
        if (m := _OBJECT.match(line)):
            sections[-1][1].append((m.group(1).upper(), m.group(2)))
        sections[-1][2].append(line)
    out = ["# Schema\n\n", GENERATED_NOTE.format(source="`sql/schema.sql`"),
           "\nThe database as the migrations leave it (`tests/migration/test_schema_truth.py` "
           "checks that the file equals them), section by section. Its header:\n\n```text\n",
           "\n".join(header).strip(), "\n```\n"]
    for title, objects, body in sections:
        out.append(f"\n## {title}\n\n")
        out.append("".join(f"- {kind.lower()} `{name}`\n" for kind, name in objects))
        text = "\n".join(body).strip("\n")
        if text:
            out.append(f"\n```sql\n{text}\n```\n")
    return "".join(out)


def pages() -> dict[str, str]:
    """``{path under docs/: Markdown}`` of every generated page."""
    return {"reference/settings.md": settings_page(), "reference/cli.md": cli_page(),
            "reference/dags.md": dags_page(), "reference/schema.md": schema_page()}


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for name, text in pages().items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
        print(target / name)
