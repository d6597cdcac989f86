"""MkDocs hooks (``mkdocs.yml``, ``hooks:``): the reference pages generated from the code.

At each build, :func:`on_files` adds the pages of :func:`docs_reference.pages` (settings, CLI,
DAGs, schema) to the site as generated files: nothing is written into ``docs/``, so they can
never be stale or edited by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import docs_reference
from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    """Add every generated reference page; a hand-written page of the same path is an error."""
    for path, text in docs_reference.pages().items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} is generated from the code (tools/docs_reference.py): "
                             "remove the hand-written file")
        files.append(File.generated(config, path, content=text))
    return files
