"""outreach: an Airflow-orchestrated batch email sender on PostgreSQL.

The domain is flat in this package and plain Python, importable (and testable) without an
Airflow environment. Around it are four wings, which the domain never imports
(``tests/unit/test_layout.py``):

* :mod:`outreach.airflow` — connections, DAG defaults, task bodies, alerts: the only part that
  imports Airflow (the DAG files in ``dags/`` call it and nothing else);
* :mod:`outreach.web` — the unsubscribe service and the campaign page (FastAPI apps the Airflow
  API server mounts);
* :mod:`outreach.cli` — the ``outreach`` command, one module per command group;
* :mod:`outreach.dev` — embedded PostgreSQL, dev SMTP/IMAP, local Airflow, the demo: imported
  only by the CLI's dev commands and the tests.

The promise it keeps lives in the database (``sql/schema.sql``, whose header says where each rule
lives): one email row per (lead, sequence step), claims by ``FOR NO KEY UPDATE SKIP LOCKED`` with
a claim token (``outreach.claim_emails_v1``), a send log with one entry per email row written only
after the SMTP server accepted the message, and one suppression function consulted at import,
queueing and right before the SMTP handoff.
"""

from __future__ import annotations

__version__ = "0.1.0"
