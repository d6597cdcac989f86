"""outreach: an Airflow-orchestrated batch email sender on PostgreSQL.

The package is plain Python: only :mod:`outreach.airflow.tasks` imports Airflow, so the domain
code is importable (and testable) without an Airflow environment. The promise it keeps lives in the
database (``sql/schema.sql``, whose header says where each rule lives): one email row per (lead,
sequence step), claims by ``FOR NO KEY UPDATE SKIP LOCKED`` with a claim token
(``outreach.claim_emails_v1``), a send log with one entry per email row written only
after the SMTP server accepted the message, and one suppression function consulted at import,
queueing and right before the SMTP handoff.
"""

from __future__ import annotations

__version__ = "0.1.0"
