"""The campaign page as a browser meets it, without Airflow in front (the real deployment is
tests/acceptance/test_operator_walkthrough.py): a logged-out browser is sent to Airflow's login
page (an API client still gets the 401), the prefix answers without its trailing slash, the
campaign is shown by name with its progress and expected finish, and the unconfirmed emails'
evidence says what was checked. Real PostgreSQL, the page's real FastAPI app."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi import Depends, FastAPI, HTTPException
from fastapi.testclient import TestClient

from outreach.progress import mailbox_finish
from outreach.queue import queue_due
from outreach.store.mailboxes import MailboxQuota
from outreach.web.campaign_page import AddSlash, create_app
from support.flow import import_demo

NOW = dt.datetime(2026, 3, 10, 8, 0, tzinfo=dt.UTC)


def quota(**kw) -> MailboxQuota:
    base = dict(id=1, status="active", daily_limit=40, used=0, remaining=100, window_start=None,
                window_end=dt.datetime(2026, 3, 10, 16, 0, tzinfo=dt.UTC), window_runs=48,
                runs_left=20, run_number=1, run_share=5, due_by_now=5, slot_used=0, run_left=5,
                handoff_fit=None)
    return MailboxQuota(**{**base, **kw})


def test_the_expected_finish_follows_the_pacing_rule():
    ten = dt.timedelta(minutes=10)
    assert mailbox_finish(30, quota(), ten, NOW) == NOW + 6 * ten  # 5 a run
    # 100 fit today (20 runs × 5, within today's 100); 50 more at 40 a day: 2 more days.
    assert mailbox_finish(150, quota(), ten, NOW) == quota().window_end + dt.timedelta(days=2)
    assert mailbox_finish(30, quota(status="paused"), ten, NOW) is None
    assert mailbox_finish(30, quota(remaining=30), None, NOW) == NOW  # no pacing: the next run


def _deny() -> None:
    raise HTTPException(status_code=401, detail="Not authenticated")


def test_a_logged_out_browser_is_sent_to_the_login_page_and_back(db_url):
    root = FastAPI()  # mounted as Airflow's api-server mounts a plugin's app
    root.mount("/outreach-campaigns", create_app(lambda: db_url, dependencies=[Depends(_deny)]))
    client = TestClient(root, base_url="http://airflow.test", follow_redirects=False)
    r = client.get("/outreach-campaigns/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert r.status_code == 303
    assert r.headers["location"] == ("/api/v2/auth/login?next=http%3A%2F%2Fairflow.test%2F"
                                     "outreach-campaigns%2F")
    assert client.get("/outreach-campaigns/report.json").status_code == 401  # an API client
    assert client.get("/outreach-campaigns/", headers={"Accept": "application/json"}
                      ).status_code == 401


def test_the_prefix_answers_without_its_trailing_slash():
    root = FastAPI()
    root.add_middleware(AddSlash, path="/outreach-campaigns")
    client = TestClient(root, follow_redirects=False)
    r = client.get("/outreach-campaigns?x=1")
    assert (r.status_code, r.headers["location"]) == (307, "/outreach-campaigns/?x=1")
    assert client.get("/outreach-campaigns/").status_code == 404  # passed on (nothing mounted)


@pytest.mark.parametrize("interval", ["10", "0"])
def test_the_page_shows_the_campaign_by_name_with_progress_and_expected_finish(
        db_url, monkeypatch, interval):
    monkeypatch.setenv("OUTREACH_SEND_INTERVAL_MINUTES", interval)
    import_demo(db_url)
    queued = queue_due(db_url)["queued"]
    page = TestClient(create_app(lambda: db_url)).get("/")
    assert page.status_code == 200
    html = page.text
    assert "<h2>Campaign Q4 operations leaders — intro <small>(q4-ops-intro)</small></h2>" in html
    assert f'<td data-k="progress.q4-ops-intro.queued">{queued}</td>' in html
    assert '<td data-k="progress.q4-ops-intro.sent">0</td>' in html
    finish = html.split('data-k="progress.q4-ops-intro.expected_finish">')[1].split("<")[0]
    eta = dt.datetime.fromisoformat(finish)
    now = dt.datetime.now(dt.UTC)
    # Paced (10 minutes a run) the demo's queue takes hours; unpaced, the next run sends it.
    assert (eta - now > dt.timedelta(hours=1)) if interval == "10" else (
        eta - now < dt.timedelta(minutes=1)), (interval, finish)
