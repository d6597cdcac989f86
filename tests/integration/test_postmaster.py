"""Postmaster Tools API v2 against a local server on loopback (fakepostmaster.py), with a real
google-auth credentials object, and the spam-rate pause rule on the stored figures."""

from __future__ import annotations

import datetime as dt

import pytest
from google.oauth2.credentials import Credentials

from outreach.cli import main
from outreach.health import SPAM_ACTOR, pause_on_spam_rate, spam_rate_breach
from outreach.mailboxes import resume_mailbox
from outreach.postmaster import PostmasterClient, PostmasterError, fetch_and_store
from support.fakepostmaster import FakePostmaster
from support.flow import import_demo, rows

DOMAIN = "mail.outreach-demo.example"  # both demo mailboxes (ids 1 and 2) send from it
NOW = dt.datetime(2026, 3, 10, 7, 0, tzinfo=dt.UTC)
DAY = dt.date(2026, 3, 10)


def day(n: int) -> dt.date:
    """``n`` days before today (NOW)."""
    return DAY - dt.timedelta(days=n)


@pytest.fixture
def api():
    server = FakePostmaster(token="test").start()
    yield server
    server.stop()


def client(api: FakePostmaster, token: str = "test") -> PostmasterClient:
    return PostmasterClient(Credentials(token=token), base_url=api.base_url)


def stats(url: str, metric: str = "SPAM_RATE", loop: str = "") -> dict[dt.date, tuple]:
    return {r["day"]: (r["value"], r["has_data"])
            for r in rows(url, "SELECT * FROM outreach.postmaster_stats WHERE domain = %s AND"
                               " metric = %s AND feedback_loop_id = %s", (DOMAIN, metric, loop))}


def mailbox(url: str, mailbox_id: int) -> dict:
    return rows(url, "SELECT status, paused_by, paused_reason FROM outreach.mailboxes WHERE id = %s",
                (mailbox_id,))[0]


def test_fetch_stores_every_day_with_missing_days_unknown_and_follows_pages(db_url, api):
    import_demo(db_url)
    api.max_page = 4  # the server returns fewer than asked: several pages
    for n in range(14):
        if n not in (0, 1, 5):  # today and yesterday not computed yet; day 5 too little traffic
            api.set(DOMAIN, day(n), 0.0004 + n / 100000)
    api.set(DOMAIN, day(3), 0.0021, loop="m2")
    status = api.compliance_status(DOMAIN)
    status["complianceData"]["rowData"][3]["status"] = {"status": "NEEDS_WORK"}  # DMARC_POLICY
    status["complianceData"]["oneClickUnsubscribeVerdict"] = {"status": {"status": "NEEDS_WORK"},
                                                              "reason": "NO_UNSUB_GENERAL"}
    api.compliance[DOMAIN] = status
    summary = fetch_and_store(db_url, client(api), days=14, now=NOW)

    spam = stats(db_url)
    assert len(spam) == 14 and min(spam) == day(13) and max(spam) == day(0)
    for n in (0, 1, 5):
        assert spam[day(n)] == (None, False)  # unknown, never 0 %
    assert spam[day(2)] == (pytest.approx(0.00042), True)
    loop2 = stats(db_url, "FEEDBACK_LOOP_SPAM_RATE", "m2")
    assert loop2[day(3)] == (0.0021, True)
    assert sum(has for _, has in loop2.values()) == 1
    assert sum(has for _, has in stats(db_url, "FEEDBACK_LOOP_SPAM_RATE", "m1").values()) == 0
    assert summary.domains[DOMAIN]["days_known"] == 12
    assert summary.domains[DOMAIN]["needs_work"] == ["DMARC_POLICY", "oneClickUnsubscribe"]

    queries = [r for r in api.requests if r["path"].endswith("domainStats:query")]
    assert len(queries) == 3  # 12 figures, at most 4 a page
    assert all(q["auth"] == "Bearer test" and q["body"]["pageSize"] <= 200 for q in queries)
    assert "pageToken" not in queries[0]["body"] and all("pageToken" in q["body"] for q in queries[1:])
    first = queries[0]["body"]
    assert first["aggregationGranularity"] == "DAILY"
    assert first["timeQuery"]["dateRanges"]["dateRanges"] == [
        {"start": {"year": 2026, "month": 2, "day": 25}, "end": {"year": 2026, "month": 3, "day": 10}}]
    assert {d.get("filter") for d in first["metricDefinitions"]} == {
        None, 'feedback_loop_id = "m1"', 'feedback_loop_id = "m2"'}
    assert any(r["path"] == f"/v2/domains/{DOMAIN}/complianceStatus" for r in api.requests)
    stored = rows(db_url, "SELECT day, needs_work, status FROM outreach.postmaster_compliance")
    assert stored == [{"day": DAY, "needs_work": ["DMARC_POLICY", "oneClickUnsubscribe"],
                       "status": status}]


def test_refetch_and_late_data(db_url, api):
    import_demo(db_url)
    api.set(DOMAIN, day(3), 0.0005)
    fetch_and_store(db_url, client(api), days=7, now=NOW)
    before = rows(db_url, "SELECT day, value, has_data, updated_at FROM outreach.postmaster_stats"
                          " ORDER BY metric, feedback_loop_id, day")
    later = NOW + dt.timedelta(days=1)
    fetch_and_store(db_url, client(api), days=8, now=later)  # same data again: nothing changes
    again = rows(db_url, "SELECT day, value, has_data, updated_at FROM outreach.postmaster_stats"
                         " ORDER BY metric, feedback_loop_id, day")
    assert [r for r in again if r["day"] <= DAY] == before
    api.set(DOMAIN, day(1), 0.0007)  # late data for a day stored as unknown
    del api.stats[DOMAIN][("SPAM_RATE", "")][day(3)]  # and a day the API no longer returns
    fetch_and_store(db_url, client(api), days=8, now=later)
    spam = stats(db_url)
    assert spam[day(1)] == (0.0007, True)
    assert spam[day(3)] == (0.0005, True)  # an unknown day never overwrites a known figure
    # 3 series (SPAM_RATE, loops m1 and m2) × the 8 days from day(6) to tomorrow
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.postmaster_stats")[0]["n"] == 3 * 8


@pytest.mark.parametrize("rate, paused", [
    (0.0009, False),   # 0.09 %
    (0.0010, False),   # 0.10 % is not above 0.1 %
    (0.0011, True),    # 0.11 %
    (None, False),     # no data at all: unknown is not 0 %, and not a reason to pause either
])
def test_spam_rate_decision_at_the_threshold(db_url, api, rate, paused):
    import_demo(db_url)
    if rate is not None:
        api.set(DOMAIN, day(2), rate)
    fetch_and_store(db_url, client(api), days=14, now=NOW)
    verdicts = pause_on_spam_rate(db_url, threshold=0.001, now=NOW)
    expected = "paused" if paused else "active"
    assert [mailbox(db_url, m)["status"] for m in (1, 2)] == [expected, expected]
    assert len(verdicts) == (2 if paused else 0)
    if paused:
        m = mailbox(db_url, 1)
        assert m["paused_by"] == SPAM_ACTOR
        assert m["paused_reason"] == (f"Postmaster spam rate of {DOMAIN}: 0.11 % on 2026-03-08, "
                                      "above 0.1 %")
    if rate is None:
        assert set(stats(db_url).values()) == {(None, False)}


def test_latest_known_figure_counts_and_feedback_loops_pause_only_their_mailbox(db_url, api):
    import_demo(db_url)
    api.set(DOMAIN, day(4), 0.0030)  # an old bad day …
    api.set(DOMAIN, day(3), 0.0006)  # … the latest known day is fine; days 0–2 have no data
    api.set(DOMAIN, day(6), 0.0025, loop="m2")  # mailbox 2's own feedback loop: latest known bad
    fetch_and_store(db_url, client(api), days=14, now=NOW)
    verdicts = pause_on_spam_rate(db_url, now=NOW)
    assert [(v.mailbox_id, v.rule) for v in verdicts] == [(2, "feedback_loop_spam_rate")]
    assert mailbox(db_url, 1)["status"] == "active"
    assert mailbox(db_url, 2)["paused_reason"] == (
        f"Postmaster feedback-loop spam rate of m2 (Feedback-ID) on {DOMAIN}: 0.25 % on "
        "2026-03-04, above 0.1 %")


def test_only_an_operator_resumes_and_old_figures_do_not_pause_again(db_url, api):
    import_demo(db_url)
    api.set(DOMAIN, day(2), 0.0012)
    fetch_and_store(db_url, client(api), days=14, now=NOW)
    assert len(pause_on_spam_rate(db_url, now=NOW)) == 2
    # The next day, no new data: both stay paused (nothing resumes automatically).
    next_day = NOW + dt.timedelta(days=1)
    fetch_and_store(db_url, client(api), days=14, now=next_day)
    assert pause_on_spam_rate(db_url, now=next_day) == []
    assert [mailbox(db_url, m)["status"] for m in (1, 2)] == ["paused", "paused"]
    # An operator resumes mailbox 1. The figure was known then: re-runs do not pause it again.
    resume_mailbox(db_url, 1, "bob", "complaint source removed", now=next_day + dt.timedelta(hours=1))
    fetch_and_store(db_url, client(api), days=14, now=next_day + dt.timedelta(hours=2))
    assert pause_on_spam_rate(db_url, now=next_day + dt.timedelta(hours=2)) == []
    assert [mailbox(db_url, m)["status"] for m in (1, 2)] == ["active", "paused"]
    # A new figure above the threshold, stored after the resume, pauses it again.
    api.set(DOMAIN, day(1), 0.0015)
    later = next_day + dt.timedelta(days=1)
    fetch_and_store(db_url, client(api), days=14, now=later)
    assert [v.mailbox_id for v in pause_on_spam_rate(db_url, now=later)] == [1]
    assert "0.15 % on 2026-03-09" in mailbox(db_url, 1)["paused_reason"]


def test_spam_rate_breach_is_strictly_above_the_threshold():
    t = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    mb = {"id": 3, "domain": "d.example", "resumed_at": None}

    def latest(domain_rate, loop_rate=None):
        out = {("d.example", "SPAM_RATE", ""): {"value": domain_rate, "day": DAY, "updated_at": t,
                                                "domain": "d.example", "feedback_loop_id": ""}}
        if loop_rate is not None:
            out[("d.example", "FEEDBACK_LOOP_SPAM_RATE", "m3")] = {
                "value": loop_rate, "day": DAY, "updated_at": t, "domain": "d.example",
                "feedback_loop_id": "m3"}
        return out

    assert spam_rate_breach(mb, latest(0.0009), 0.001) is None
    assert spam_rate_breach(mb, latest(0.001), 0.001) is None
    assert spam_rate_breach(mb, latest(0.0011), 0.001)[0] == "spam_rate"
    assert spam_rate_breach(mb, latest(0.0002, 0.004), 0.001)[0] == "feedback_loop_spam_rate"
    assert spam_rate_breach(mb, {}, 0.001) is None
    assert spam_rate_breach({**mb, "resumed_at": t}, latest(0.004), 0.001) is None


def test_api_errors_are_reported_without_the_token(db_url, api):
    import_demo(db_url)
    with pytest.raises(PostmasterError, match="credentials refused") as err:
        fetch_and_store(db_url, client(api, token="wrong-token-123"), days=3, now=NOW)
    assert "wrong-token-123" not in str(err.value)
    assert api.requests[-1]["auth"] == "Bearer wrong-token-123"  # the server did say 401
    with pytest.raises(PostmasterError, match="HTTP 400 INVALID_ARGUMENT metricDefinitions"):
        client(api).query_domain_stats(DOMAIN, [], DAY, DAY)
    with pytest.raises(ValueError, match="page_size"):
        client(api).query_domain_stats(DOMAIN, [], DAY, DAY, page_size=201)
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.postmaster_stats")[0]["n"] == 0


def test_cli_postmaster_with_a_service_account_connection(db_url, api, monkeypatch, capsys):
    """``outreach postmaster`` reads the key from the Airflow connection, google-auth trades a
    signed JWT at the (local) token endpoint; ``outreach mailbox check-spam-rate`` then pauses."""
    import_demo(db_url)
    api.token = "local-access-token"
    today = dt.datetime.now(dt.UTC).date()
    api.set(DOMAIN, today - dt.timedelta(days=3), 0.0011)
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_POSTMASTER", api.connection_json())
    monkeypatch.setenv("OUTREACH_POSTMASTER_BASE_URL", api.base_url)
    assert main(["postmaster", "--days", "5"]) == 0
    out = capsys.readouterr().out
    assert f"{DOMAIN} {today - dt.timedelta(days=4)}..{today}: 1 day(s) with data, 14 unknown" in out
    assert [r["form"]["grant_type"] for r in api.requests if r["path"] == "/token"] == [
        ["urn:ietf:params:oauth:grant-type:jwt-bearer"]]
    assert main(["mailbox", "check-spam-rate"]) == 0
    out = capsys.readouterr().out
    assert "mailbox 1 (a***@mail.outreach-demo.example) paused: Postmaster spam rate" in out
    assert "0.11 %" in out and "local-access-token" not in out
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_POSTMASTER", '{"conn_type": "generic", "extra": {}}')
    assert main(["postmaster"]) == 1
    assert "neither extra keyfile_dict nor key_path" in capsys.readouterr().err
