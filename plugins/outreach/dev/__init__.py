"""The dev wing: what only serves local runs and tests — the embedded PostgreSQL, the dev SMTP and
IMAP servers, local Airflow runs, the demo and the process deployments of ``make airflow``.

Imported only by the CLI's dev commands (:mod:`outreach.cli`) and the tests; never by the domain,
the Airflow wing or the web wing (``tests/unit/test_layout.py`` checks it).
"""
