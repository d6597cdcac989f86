"""The typed store matches what PostgreSQL says of each query (no query is run, each is only
prepared and described on the migrated database): a function's keyword parameters are the
query's ``%(name)s`` parameters, a row dataclass's fields are the query's columns in order, and
a function that returns one column's value runs a query of one column.

A query edited without its store function (a column added, renamed or dropped, a parameter
added) fails here, before any caller reads a field that is not there.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing

import psycopg

import outreach.store
from outreach import db

_PARAM = re.compile(r"%\((\w+)\)s")
_COPY = {"lead_stage_copy", "lead_stage_copy_keyed"}  # COPY … FROM STDIN: not preparable


def _store_functions() -> list[tuple[str, typing.Callable[..., object]]]:
    out = []
    for info in pkgutil.iter_modules(outreach.store.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"outreach.store.{info.name}")
        out += [(name, f) for name, f in inspect.getmembers(module, inspect.isfunction)
                if f.__module__ == module.__name__ and not name.startswith("_")]
    return sorted(out)


def _describe(conn: psycopg.Connection, name: str) -> tuple[list[str], list[str]]:
    """``(parameter names, column names)`` of the named query, as the server prepares it."""
    params: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in params:
            params.append(m.group(1))
        return f"${params.index(m.group(1)) + 1}"

    sql = _PARAM.sub(number, db.query(name)).replace("%%", "%")
    prepared = conn.pgconn.prepare(name.encode(), sql.encode())
    assert prepared.error_message in (b"", None), (name, prepared.error_message)
    d = conn.pgconn.describe_prepared(name.encode())
    return params, [d.fname(i).decode() for i in range(d.nfields)]


def _row_class(hint: object) -> type | None:
    """The dataclass a return type names (itself, in a list, or optional), else ``None``."""
    for arg in (hint, *typing.get_args(hint)):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
        if typing.get_origin(arg) is list:
            return _row_class(typing.get_args(arg)[0])
    return None


def _returns_nothing(hint: object) -> bool:
    return hint is type(None) or hint is None


def test_every_store_function_matches_its_query(db_url: str) -> None:
    functions = _store_functions()
    assert len(functions) > 100
    problems = []
    with psycopg.connect(db_url) as conn:
        # The import's stage table: a temporary table the lead_stage_* queries name.
        conn.execute(db.query("lead_stage_create"))
        for name, func in functions:
            if name in _COPY:
                continue
            params, columns = _describe(conn, name)
            signature = inspect.signature(func)
            kwargs = [p.rstrip("_") for p in list(signature.parameters)[1:]]
            if sorted(kwargs) != sorted(params):
                problems.append(f"{name}: parameters {sorted(kwargs)}, the query takes "
                                f"{sorted(params)}")
            hint = typing.get_type_hints(func)["return"]
            row = _row_class(hint)
            if row is not None:
                fields = [f.name.rstrip("_") for f in dataclasses.fields(row)]
                if fields != columns:
                    problems.append(f"{name}: {row.__name__} has {fields}, the query returns "
                                    f"{columns}")
            elif not _returns_nothing(hint):
                if len(columns) != 1:
                    problems.append(f"{name}: returns one column's value, the query returns "
                                    f"{columns}")
    assert not problems, "\n".join(problems)
