"""Airflow plugin: mounts the outreach one-click unsubscribe service in the Airflow API server.

Airflow 3 serves FastAPI apps that plugins list in ``fastapi_apps`` (``airflow/plugins_manager.py``,
``airflow/api_fastapi/app.py:init_plugins``: ``app.mount(url_prefix, app)``). The service is then
at ``<api server>/outreach/unsubscribe/<token>``, so ``OUTREACH_PUBLIC_URL`` must end in
``/outreach``; expose only that path publicly (README: "The unsubscribe service").

Importing this file touches neither the database nor the network nor a secret: the app reads the
database URL and the unsubscribe secret at its first request, through the same functions the
sender uses (:mod:`outreach.airflow_adapter`). This file lives directly in ``plugins/`` because
``plugins/outreach/`` is excluded from plugin loading by ``plugins/.airflowignore``.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from outreach import airflow_adapter
from outreach.unsubscribe_app import create_app

URL_PREFIX = "/outreach"


class OutreachPlugin(AirflowPlugin):
    """Serves the one-click unsubscribe endpoint (RFC 8058) from the Airflow API server."""

    name = "outreach"
    fastapi_apps = [{
        "app": create_app(airflow_adapter.database_url, airflow_adapter.unsubscribe_secret),
        "url_prefix": URL_PREFIX,
        "name": "outreach-unsubscribe",
    }]
