"""Work done once per ``pytest -n N`` run instead of once per worker: the first worker to ask
builds it under a file lock, the others wait for it and take what it left (pytest-xdist's own
recipe for session fixtures, "Making session-scoped fixtures execute only once")."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

RUN_VAR = "OUTREACH_TEST_RUN"
"""Set by the first conftest of a pytest run (the xdist controller) and inherited by its workers."""


def run_folder() -> Path:
    """The folder every process of this pytest run shares, under the system's temporary folder
    (not pytest's basetemp: each worker's session changes the permissions of
    ``/tmp/pytest-of-<user>``); removed by the controller at the end (tests/conftest.py)."""
    folder = Path(tempfile.gettempdir()) / f"outreach-test-run-{os.environ[RUN_VAR]}"
    folder.mkdir(mode=0o755, exist_ok=True)
    return folder


def once(name: str, build: Callable[[Path], Any]) -> tuple[Path, Any]:
    """Return ``(folder, value)``: ``build(folder)`` run once per pytest run in ``folder`` (its
    own subfolder of :func:`run_folder`); ``value`` is what it returned (JSON), read back by every
    later caller. A build that raised is tried again by the next caller."""
    shared = run_folder()
    folder, done = shared / name, shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            done.write_text(json.dumps(build(folder)))
    return folder, json.loads(done.read_text())
