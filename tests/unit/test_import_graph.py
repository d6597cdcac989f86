"""No import circle in ``plugins/outreach``, checked statically (every module parsed, nothing
imported).

Every ``import`` counts, at module level or inside a function: an import deferred into a function
to dodge a circle still ties the two modules together (one cannot be read, changed or tested
without the other), so it is a circle all the same. Only imports under ``if TYPE_CHECKING:`` are
left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import ROOT

PLUGINS = ROOT / "plugins"
PACKAGE = PLUGINS / "outreach"


def module_name(path: Path) -> str:
    """``plugins/outreach/store/emails.py`` → ``outreach.store.emails`` (a package: its
    ``__init__``'s folder)."""
    parts = list(path.relative_to(PLUGINS).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere but under ``if TYPE_CHECKING:``
    (``from outreach import db`` names ``outreach.db``; ``from outreach.db import connect``
    names ``outreach.db``)."""
    out: set[str] = set()
    todo: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while todo:
        node = todo.pop()
        if _type_checking_only(node):
            todo.extend(getattr(node, "orelse", []))
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    out.add(full)
                elif node.module in known:
                    out.add(node.module)
        todo.extend(ast.iter_child_nodes(node))
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: the package's modules it imports}`` for every module of ``plugins/outreach``."""
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    known = set(paths)
    return {name: imported(path, known) - {name} for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without
    recursion): each is a set of modules that import one another, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_finder_sees_a_deferred_import(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from outreach import db\n\ndef f():\n    from outreach.settings import Settings\n"
                      "\nif TYPE_CHECKING:\n    from outreach import send\n")
    assert imported(module, {"outreach.db", "outreach.settings", "outreach.send"}) == {
        "outreach.db", "outreach.settings"}


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert len(graph) > 40  # the package's modules were found
    assert "outreach.settings" in graph["outreach.health"]  # its imports were read
    assert circles(graph) == []
