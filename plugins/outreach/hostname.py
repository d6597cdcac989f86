"""The hostname a task instance records (Airflow's ``[core] hostname_callable``).

Where several Celery workers share one host (``make airflow EXECUTOR=celery``), each is started
with its own ``OUTREACH_WORKER_HOSTNAME``, so the task instances in the metadata database (and the
UI) say which worker ran them; elsewhere (a container per worker, docker-compose.yaml) it is the
host's fully qualified name, as with Airflow's default.
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    """Return ``OUTREACH_WORKER_HOSTNAME`` when set, else :func:`socket.getfqdn`."""
    return os.environ.get("OUTREACH_WORKER_HOSTNAME") or socket.getfqdn()
