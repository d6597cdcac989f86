"""The web wing: the FastAPI apps the Airflow API server mounts (``plugins/outreach_plugin.py``):
the public unsubscribe service (:mod:`outreach.web.unsubscribe_app`) and the campaign page
(:mod:`outreach.web.campaign_page`, its files in ``static/``)."""
