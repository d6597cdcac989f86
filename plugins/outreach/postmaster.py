"""Google Postmaster Tools API v2: read our domains' spam rates and compliance, store them daily.

``domainStats:query`` (``SPAM_RATE`` and one ``FEEDBACK_LOOP_SPAM_RATE`` per mailbox,
``feedback_loop_id = "m<id>"``) and ``complianceStatus``; one row per domain, metric, feedback
loop and day, a day without data stored as unknown, never 0 %. Authentication is google-auth's
(:func:`outreach.airflow.connections.postmaster_credentials`); tokens are never logged. What is
read and why: docs/explanation/mailbox-health.md; the pause rule: :mod:`outreach.health`."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from outreach import db
from outreach.feedback import mailbox_feedback_loop_id
from outreach.logutil import log
from outreach.settings import POSTMASTER_BASE_URL, HealthSettings
from outreach.store import postmaster as store

DEFAULT_BASE_URL = POSTMASTER_BASE_URL
SCOPE = "https://www.googleapis.com/auth/postmaster.traffic.readonly"
MAX_PAGE_SIZE = 200  # the API's maximum pageSize for domainStats.query
SPAM_RATE = "SPAM_RATE"
FEEDBACK_LOOP_SPAM_RATE = "FEEDBACK_LOOP_SPAM_RATE"
_DOMAIN_METRIC = "spam_rate"  # our name for the domain-wide metric in a query
_LOOP_PREFIX = "fbl_spam_rate:"  # our name for a feedback-loop metric: prefix + loop id


class PostmasterError(RuntimeError):
    """The Postmaster API refused a request or answered something we cannot read.

    The message names the request and the API's error status, never a token.
    """


def base_url_from_env() -> str:
    """Return ``OUTREACH_POSTMASTER_BASE_URL`` or the Google endpoint (tests use a local server),
    read by :class:`outreach.settings.HealthSettings`.

    :raises outreach.settings.SettingsError: the value is not an http(s) URL.
    """
    return HealthSettings().postmaster_base_url


def _date(d: dt.date) -> dict[str, int]:
    return {"year": d.year, "month": d.month, "day": d.day}


def metric_definitions(feedback_loop_ids: list[str]) -> list[dict[str, Any]]:
    """Return the query's ``metricDefinitions``: the domain's ``SPAM_RATE`` and one
    ``FEEDBACK_LOOP_SPAM_RATE`` per feedback-loop id (filter ``feedback_loop_id = "<id>"``)."""
    out: list[dict[str, Any]] = [{"name": _DOMAIN_METRIC, "baseMetric": {"standardMetric": SPAM_RATE}}]
    for loop_id in feedback_loop_ids:
        out.append({"name": _LOOP_PREFIX + loop_id,
                    "baseMetric": {"standardMetric": FEEDBACK_LOOP_SPAM_RATE},
                    "filter": f'feedback_loop_id = "{loop_id}"'})
    return out


def _metric_of(name: str) -> tuple[str, str]:
    """Map our metric name from a response back to ``(metric, feedback_loop_id)``."""
    if name == _DOMAIN_METRIC:
        return SPAM_RATE, ""
    if name.startswith(_LOOP_PREFIX):
        return FEEDBACK_LOOP_SPAM_RATE, name[len(_LOOP_PREFIX):]
    raise PostmasterError(f"domainStats: unexpected metric name {name!r} in the response")


class PostmasterClient:
    """A small client for the two Postmaster Tools API v2 calls we use.

    :param credentials: google-auth credentials with the scope :data:`SCOPE` (tests pass
        ``google.oauth2.credentials.Credentials(token=...)``, which needs no network).
    :param base_url: API root (default :func:`base_url_from_env`).
    :param timeout: seconds per HTTP request.
    """

    def __init__(self, credentials: Any, base_url: str | None = None, timeout: float = 60.0) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self.base_url = (base_url or base_url_from_env()).rstrip("/")
        self.timeout = timeout
        self.session = AuthorizedSession(credentials)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        import requests
        from google.auth.exceptions import GoogleAuthError

        try:
            resp = self.session.request(method, self.base_url + path, json=body, timeout=self.timeout)
        except GoogleAuthError as exc:  # the API refused the token and it could not be refreshed
            raise PostmasterError(f"{method} {path}: credentials refused or not refreshable: "
                                  f"{type(exc).__name__}") from None
        except requests.RequestException as exc:
            raise PostmasterError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            try:
                err = resp.json().get("error", {})
                detail = f"{err.get('status', '')} {err.get('message', '')}".strip()
            except ValueError:
                detail = resp.text[:200]
            raise PostmasterError(f"{method} {path}: HTTP {resp.status_code} {detail}")
        try:
            return resp.json()
        except ValueError:
            raise PostmasterError(f"{method} {path}: the answer is not JSON") from None

    def query_domain_stats(self, domain: str, metrics: list[dict[str, Any]], start: dt.date,
                           end: dt.date, page_size: int = MAX_PAGE_SIZE) -> list[dict[str, Any]]:
        """Return every ``DomainStat`` of ``domain`` for the days ``start``..``end`` (inclusive),
        following ``nextPageToken`` until the last page.

        :param metrics: ``metricDefinitions`` (see :func:`metric_definitions`).
        :param page_size: at most :data:`MAX_PAGE_SIZE` (200).
        :raises PostmasterError: the API refused or answered something unreadable.
        :raises ValueError: ``page_size`` out of range.
        """
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be 1 to {MAX_PAGE_SIZE}")
        body: dict[str, Any] = {
            "metricDefinitions": metrics,
            "timeQuery": {"dateRanges": {"dateRanges": [{"start": _date(start), "end": _date(end)}]}},
            "aggregationGranularity": "DAILY",
            "pageSize": page_size,
        }
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        while True:
            page = self._call("POST", f"/v2/domains/{domain}/domainStats:query", body)
            out.extend(page.get("domainStats") or [])
            token = page.get("nextPageToken") or ""
            if not token:
                return out
            if token in seen:
                raise PostmasterError(f"domainStats:query for {domain}: the API repeated page token")
            seen.add(token)
            body = {**body, "pageToken": token}

    def compliance_status(self, domain: str) -> dict[str, Any]:
        """Return the domain's ``complianceStatus`` resource as the API sends it.

        :raises PostmasterError: the API refused or answered something unreadable.
        """
        return self._call("GET", f"/v2/domains/{domain}/complianceStatus")


def parse_stats(stats: list[dict[str, Any]]) -> dict[tuple[str, str, dt.date], float]:
    """Turn ``DomainStat`` objects into ``{(metric, feedback_loop_id, day): fraction}``.

    :raises PostmasterError: a stat without a date or a ``value.floatValue`` (a shape we do not
        know is refused rather than read as "no data").
    """
    out: dict[tuple[str, str, dt.date], float] = {}
    for s in stats:
        metric, loop_id = _metric_of(s.get("metric", ""))
        try:
            d = s["date"]
            day = dt.date(int(d["year"]), int(d["month"]), int(d["day"]))
            value = float(s["value"]["floatValue"])
        except (KeyError, TypeError, ValueError):
            raise PostmasterError(f"domainStats: cannot read {s!r}") from None
        if not 0.0 <= value <= 1.0:
            raise PostmasterError(f"domainStats: {metric} {value} on {day} is not a fraction")
        out[(metric, loop_id, day)] = value
    return out


def needs_work(status: dict[str, Any]) -> list[str]:
    """Return the requirements (and unsubscribe verdicts) of a ``complianceStatus`` that are not
    ``COMPLIANT``, e.g. ``["DMARC_POLICY", "oneClickUnsubscribe"]``."""
    out: list[str] = []
    for data in (status.get("complianceData") or {}, status.get("subdomainComplianceData") or {}):
        for row in data.get("rowData") or []:
            state = (row.get("status") or {}).get("status")
            if state and state != "COMPLIANT":
                out.append(str(row.get("requirement", "?")))
        for key in ("oneClickUnsubscribeVerdict", "honorUnsubscribeVerdict"):
            state = ((data.get(key) or {}).get("status") or {}).get("status")
            if state and state != "COMPLIANT":
                out.append(key.removesuffix("Verdict"))
    return sorted(set(out))


@dataclass
class FetchSummary:
    """What one fetch stored: per domain, the days ``known``/``unknown`` per metric series, and
    the compliance requirements that need work."""

    start: dt.date
    end: dt.date
    domains: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "domains": self.domains}


def fetch_and_store(url: str, client: PostmasterClient, *, days: int = 14,
                    now: dt.datetime | None = None, page_size: int = MAX_PAGE_SIZE) -> FetchSummary:
    """Fetch the last ``days`` days (UTC dates, today included) for every sending domain and
    store them; also fetch and store each domain's compliance status.

    Every day of the range is stored for every series: the API's figure, or unknown when the
    API left the day out. Safe to re-run: upserts, and an unknown day never overwrites a figure.

    :param now: a fixed clock (UTC) for the range and the stored times; default the current time.
    :raises PostmasterError: a request failed (what was stored before stays stored).
    """
    clock = now or dt.datetime.now(dt.UTC)
    end = clock.astimezone(dt.UTC).date()
    start = end - dt.timedelta(days=days - 1)
    all_days = [start + dt.timedelta(days=i) for i in range(days)]
    summary = FetchSummary(start, end)
    with db.connect(url, autocommit=True) as conn:
        domains = store.postmaster_domain_list(conn)
    for d in domains:
        domain = d.domain
        loop_ids = [mailbox_feedback_loop_id(m) for m in d.mailbox_ids]
        values = parse_stats(client.query_domain_stats(domain, metric_definitions(loop_ids),
                                                       start, end, page_size=page_size))
        series = [(SPAM_RATE, "")] + [(FEEDBACK_LOOP_SPAM_RATE, loop) for loop in loop_ids]
        rows = [(m, loop, day, values.get((m, loop, day))) for m, loop in series for day in all_days]
        with db.transaction(url) as conn:
            store.postmaster_stat_upsert(
                conn, domain=domain, now=now, metrics=[r[0] for r in rows],
                feedback_loop_ids=[r[1] for r in rows], days=[r[2] for r in rows],
                values=[r[3] for r in rows])
        status = client.compliance_status(domain)
        work = needs_work(status)
        with db.transaction(url) as conn:
            store.postmaster_compliance_upsert(conn, domain=domain, now=now, needs_work=work,
                                               status=Jsonb(status))
        known = sum(1 for r in rows if r[3] is not None)
        summary.domains[domain] = {"series": len(series), "days_known": known,
                                   "days_unknown": len(rows) - known, "needs_work": work}
        log.info("postmaster %s %s..%s: %s series, %s day(s) with data, %s without (stored as "
                 "unknown)", domain, start, end, len(series), known, len(rows) - known)
        if work:
            log.warning("postmaster %s: compliance needs work: %s", domain, ", ".join(work))
    return summary
