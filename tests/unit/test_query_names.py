"""The named queries and the code that runs them agree, read statically (no database).

``sql/queries/<noun>s.sql`` holds only queries named ``<noun>_…`` (the file is the noun); the
typed store (``plugins/outreach/store/<file>.py``) has one function per query of its file, named
like it and running it; every query name the code passes to :mod:`outreach.db` (or the store's
runners) exists, and every query is run by the product (plugins/), not only by tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from outreach.db import parse_queries
from support.paths import ROOT

QUERIES = ROOT / "sql" / "queries"
STORE = ROOT / "plugins" / "outreach" / "store"
_RUNNERS = {"run", "one", "query", "execute", "many", "maybe_one", "values", "maybe_value",
            "one_value", "_guarded"}
_NAME = re.compile(r"^[a-z][a-z0-9]*_[a-z0-9_]+$")


def _prefix(stem: str) -> str:
    """``emails`` → ``email_``, ``mailboxes`` → ``mailbox_``, ``inbound`` → ``inbound_``."""
    if stem.endswith("xes"):
        return stem[:-2] + "_"
    if stem.endswith("s"):
        return stem[:-1] + "_"
    return stem + "_"


def _defined() -> dict[str, str]:
    """``{query name: file stem}`` of every ``-- name:`` in sql/queries."""
    out: dict[str, str] = {}
    for path in sorted(QUERIES.glob("*.sql")):
        for name in parse_queries(path.read_text(encoding="utf-8"), str(path)):
            assert name not in out, f"{name} is defined in {out[name]}.sql and {path.name}"
            out[name] = path.stem
    return out


def _names_run(tree: ast.AST) -> list[tuple[str, int]]:
    """Query names passed as a string literal to a runner (``db.run(conn, "x")``,
    ``db.query("x")``, the store's ``many(conn, "x", …)``…), with their line."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in _RUNNERS:
            continue
        for arg in node.args[:2]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                    and _NAME.match(arg.value):
                found.append((arg.value, node.lineno))
    return found


def _python_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


def test_every_query_is_named_after_its_file() -> None:
    wrong = [f"{stem}.sql: {name}" for name, stem in _defined().items()
             if not name.startswith(_prefix(stem))]
    assert not wrong, "queries whose name does not start with their file's noun: " + ", ".join(wrong)


def test_every_name_the_code_runs_exists() -> None:
    defined = _defined()
    missing = []
    for path in _python_files("plugins", "dags", "tests"):
        for name, line in _names_run(ast.parse(path.read_text(encoding="utf-8"))):
            if name not in defined:
                missing.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not missing, "query names with no -- name: in sql/queries: " + ", ".join(missing)


def test_no_query_is_unused() -> None:
    used = {name for path in _python_files("plugins")
            for name, _ in _names_run(ast.parse(path.read_text(encoding="utf-8")))}
    unused = sorted(set(_defined()) - used)
    assert not unused, "queries the product never runs: " + ", ".join(unused)


def test_the_store_has_one_function_per_query_named_like_it() -> None:
    defined = _defined()
    seen: dict[str, str] = {}
    problems = []
    for path in sorted(STORE.glob("[!_]*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            ran = {name for name, _ in _names_run(node)}
            if ran != {node.name}:
                problems.append(f"store/{path.name}: {node.name} runs {sorted(ran)}")
            elif defined.get(node.name) != path.stem:
                problems.append(f"store/{path.name}: {node.name} is not a query of {path.stem}.sql")
            seen[node.name] = path.stem
    problems += [f"{stem}.sql: {name} has no store function" for name, stem in defined.items()
                 if name not in seen]
    assert not problems, "; ".join(problems)
