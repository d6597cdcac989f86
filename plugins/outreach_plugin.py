"""Airflow plugin: the outreach one-click unsubscribe service and the campaign page, in the
Airflow API server.

Airflow 3 serves FastAPI apps that plugins list in ``fastapi_apps`` (``airflow/plugins_manager.py``,
``airflow/api_fastapi/app.py:init_plugins``: ``app.mount(url_prefix, app)``), and adds
``external_views`` to its navigation.

* ``/outreach/unsubscribe/<token>``: the unsubscribe service, public by design (RFC 8058: no
  login); ``OUTREACH_PUBLIC_URL`` must end in ``/outreach``. Expose only that path publicly
  (docs/howto/unsubscribe-service.md).
* ``/outreach-campaigns/``: the campaign page (:mod:`outreach.web.campaign_page`), in the navigation
  under Browse as "Campaigns". A mounted plugin app is *not* behind Airflow's login by itself;
  every route of this one depends on Airflow's own check (``requires_access_view(WEBSITE)``: the
  JWT of the UI's session cookie or an ``Authorization: Bearer`` token, validated by the auth
  manager), so an anonymous request gets 401 — a browser is sent to Airflow's login page and
  back instead. ``/outreach-campaigns`` (no slash) redirects to the page.

Importing this file touches neither the database nor the network nor a secret: the apps read
the database URL and the unsubscribe secret at request time, through the same functions the
sender uses (:mod:`outreach.airflow.connections`). This file lives directly in ``plugins/`` because
``plugins/outreach/`` is excluded from plugin loading by ``plugins/.airflowignore``.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends

from outreach.airflow import connections
from outreach.web import campaign_page
from outreach.web.unsubscribe_app import create_app

URL_PREFIX = "/outreach"
CAMPAIGNS_PREFIX = "/outreach-campaigns"


def _airflow_login() -> list:
    """Airflow's own authentication and authorisation, as a FastAPI dependency."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return [Depends(requires_access_view(AccessView.WEBSITE))]


class OutreachPlugin(AirflowPlugin):
    """Serves the one-click unsubscribe endpoint (RFC 8058) and the campaign page."""

    name = "outreach"
    fastapi_apps = [
        {"app": create_app(connections.database_url, connections.unsubscribe_secret),
         "url_prefix": URL_PREFIX, "name": "outreach-unsubscribe"},
        {"app": campaign_page.create_app(connections.database_url,
                                         dependencies=_airflow_login(),
                                         accounts=connections.imap_account,
                                         settings=connections.settings),
         "url_prefix": CAMPAIGNS_PREFIX, "name": "outreach-campaigns"},
    ]
    # /outreach-campaigns (no slash) is the root app's, never the mounted one's: redirect it.
    fastapi_root_middlewares = [
        {"middleware": campaign_page.AddSlash, "kwargs": {"path": CAMPAIGNS_PREFIX},
         "name": "outreach-campaigns-slash"},
    ]
    external_views = [
        {"name": "Campaigns", "href": CAMPAIGNS_PREFIX + "/", "destination": "nav",
         "category": "browse", "url_route": "outreach-campaigns"},
    ]
