"""Where the project's files are: SQL, templates, shipped sample data, local state.

All paths are absolute :class:`pathlib.Path` objects. The project root is ``OUTREACH_HOME`` when
set, otherwise the folder that holds ``plugins/outreach`` (the repository checkout).
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """Return the project root (``OUTREACH_HOME`` or the checkout holding this package)."""
    env = os.environ.get("OUTREACH_HOME")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2]


def sql_dir() -> Path:
    """Return ``<root>/sql`` (migrations and named queries)."""
    return project_root() / "sql"


def templates_dir() -> Path:
    """Return ``<root>/include/templates`` (Jinja2 email templates), or ``OUTREACH_TEMPLATES``."""
    env = os.environ.get("OUTREACH_TEMPLATES")
    return Path(env).resolve() if env else project_root() / "include" / "templates"


def campaigns_dir() -> Path:
    """Return ``<root>/include/campaigns`` (campaign files), or ``OUTREACH_CAMPAIGNS``: the
    folder whose campaigns' declared sources the import DAGs read (outreach.sources)."""
    env = os.environ.get("OUTREACH_CAMPAIGNS")
    return Path(env).resolve() if env else project_root() / "include" / "campaigns"


def suppression_sources_file() -> Path:
    """Return ``<root>/include/suppression_sources.yaml``, or ``OUTREACH_SUPPRESSION_SOURCES``:
    the do-not-contact sources (``suppressions:``) that ``outreach_import_suppression_sources``
    imports (outreach.airflow.suppression_sources). A missing file declares none."""
    env = os.environ.get("OUTREACH_SUPPRESSION_SOURCES")
    return Path(env).resolve() if env else project_root() / "include" / "suppression_sources.yaml"


def state_dir() -> Path:
    """Return ``<root>/.outreach``: local state (embedded PostgreSQL data, demo Maildir)."""
    env = os.environ.get("OUTREACH_STATE_DIR")
    return Path(env).resolve() if env else project_root() / ".outreach"


def resolve(path: str | os.PathLike[str]) -> Path:
    """Resolve ``path`` against the project root when it is relative."""
    p = Path(path)
    return p if p.is_absolute() else project_root() / p
