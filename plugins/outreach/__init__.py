"""outreach: an Airflow-orchestrated batch email sender on PostgreSQL.

The domain is flat and plain Python, importable without Airflow; its wings, which it never
imports (``tests/unit/test_layout.py``): :mod:`outreach.airflow` (the only part importing
Airflow), :mod:`outreach.web` (FastAPI apps), :mod:`outreach.cli` and :mod:`outreach.dev`
(embedded servers, local Airflow, the demo). The promise lives in the database
(``sql/schema.sql``): docs/explanation/promise.md; the layout: docs/reference/layout.md.
Throughout, ``url`` is the outreach database's libpq URL and ``now`` a fixed clock (aware, UTC;
``None``: the database clock)."""

from __future__ import annotations

__version__ = "0.1.0"
