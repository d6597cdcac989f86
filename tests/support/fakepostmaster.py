"""A local HTTP server on loopback that plays Google Postmaster Tools API v2 (stdlib http.server).

It answers the two calls outreach makes, with the shapes Google documents:

* ``POST /v2/domains/{domain}/domainStats:query`` — ``metricDefinitions`` (``SPAM_RATE``;
  ``FEEDBACK_LOOP_SPAM_RATE`` needs ``filter: feedback_loop_id = "<id>"``), ``timeQuery.dateRanges
  .dateRanges[{start, end}]`` (inclusive dates), ``aggregationGranularity: DAILY``, ``pageSize``
  (at most 200, else 400 INVALID_ARGUMENT), ``pageToken``. The answer is ``{"domainStats":
  [{"name", "metric", "date": {year, month, day}, "value": {"floatValue": x}}], "nextPageToken"}``;
  days without data are left out, as Google does; ``nextPageToken`` is omitted on the last page.
  ``max_page`` makes the server return fewer rows than asked ("the server may return fewer"), so
  pagination is exercised.
* ``GET /v2/domains/{domain}/complianceStatus`` — ``{"name", "complianceData": {"domainId",
  "rowData": [{"requirement", "status": {"status"}}], "oneClickUnsubscribeVerdict",
  "honorUnsubscribeVerdict"}}``.

Requests without ``Authorization: Bearer <token>`` get 401. ``/token`` plays Google's OAuth token
endpoint for a service-account JWT grant (for runs through Airflow with a real service-account
key). Every request is recorded in ``requests``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

_QUERY = re.compile(r"^/v2/domains/([^/]+)/domainStats:query$")
_COMPLIANCE = re.compile(r"^/v2/domains/([^/]+)/complianceStatus$")
_LOOP_FILTER = re.compile(r'^\s*feedback_loop_id\s*=\s*"([^"]+)"\s*$')


class FakePostmaster:
    """The fake API. ``stats[domain][(metric, feedback_loop_id)][date] = fraction``; a date
    missing from the dict is a day without data. ``compliance[domain]`` overrides the default
    all-compliant status."""

    def __init__(self, token: str = "test", max_page: int = 200) -> None:
        self.token = token
        self.max_page = max_page
        self.stats: dict[str, dict[tuple[str, str], dict[dt.date, float]]] = {}
        self.compliance: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def set(self, domain: str, day: dt.date, value: float, *, loop: str = "") -> None:
        """Give ``domain`` a figure for ``day``: the domain's SPAM_RATE, or a feedback loop's."""
        metric = "FEEDBACK_LOOP_SPAM_RATE" if loop else "SPAM_RATE"
        self.stats.setdefault(domain, {}).setdefault((metric, loop), {})[day] = value

    def service_account_key(self) -> dict[str, str]:
        """Return a service account's JSON key (a fresh RSA key) whose ``token_uri`` is this
        server's ``/token``, as Google's key files are shaped."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        return {"type": "service_account", "project_id": "outreach-test",
                "private_key_id": "test-key-1", "private_key": pem,
                "client_email": "postmaster-reader@outreach-test.iam.gserviceaccount.com",
                "client_id": "1", "token_uri": self.base_url + "/token"}

    def connection_json(self) -> str:
        """Return the Airflow connection ``outreach_postmaster`` (JSON form) with such a key."""
        return json.dumps({"conn_type": "google_cloud_platform",
                           "extra": {"keyfile_dict": json.dumps(self.service_account_key())}})

    def start(self) -> FakePostmaster:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- the API -------------------------------------------------------------------------------

    def query(self, domain: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        defs = body.get("metricDefinitions") or []
        if not defs:
            return 400, _error(400, "INVALID_ARGUMENT", "metricDefinitions is required")
        page_size = int(body.get("pageSize") or 10)
        if not 1 <= page_size <= 200:
            return 400, _error(400, "INVALID_ARGUMENT", "pageSize must be at most 200")
        if body.get("aggregationGranularity", "DAILY") != "DAILY":
            return 400, _error(400, "INVALID_ARGUMENT", "only DAILY here")
        try:
            ranges = body["timeQuery"]["dateRanges"]["dateRanges"]
            start, end = (dt.date(**ranges[0][k]) for k in ("start", "end"))
        except (KeyError, IndexError, TypeError):
            return 400, _error(400, "INVALID_ARGUMENT", "timeQuery.dateRanges is required")
        series = []
        for d in defs:
            metric = d.get("baseMetric", {}).get("standardMetric")
            if metric == "SPAM_RATE":
                series.append((d["name"], (metric, "")))
            elif metric == "FEEDBACK_LOOP_SPAM_RATE":
                m = _LOOP_FILTER.match(d.get("filter", ""))
                if not m:
                    return 400, _error(400, "INVALID_ARGUMENT",
                                       'FEEDBACK_LOOP_SPAM_RATE needs feedback_loop_id = "<id>"')
                series.append((d["name"], (metric, m.group(1))))
            else:
                return 400, _error(400, "INVALID_ARGUMENT", f"unsupported metric {metric}")
        rows = []
        data = self.stats.get(domain, {})
        day = start
        while day <= end:
            for name, key in series:
                value = data.get(key, {}).get(day)
                if value is not None:  # days without data are omitted
                    rows.append({
                        "name": f"domains/{domain}/domainStats/{day:%Y%m%d}/{name}",
                        "metric": name,
                        "date": {"year": day.year, "month": day.month, "day": day.day},
                        "value": {"floatValue": value}})
            day += dt.timedelta(days=1)
        offset = int(base64.urlsafe_b64decode(body["pageToken"]).decode()) if body.get("pageToken") else 0
        size = min(page_size, self.max_page)
        out: dict[str, Any] = {"domainStats": rows[offset:offset + size]}
        if offset + size < len(rows):
            out["nextPageToken"] = base64.urlsafe_b64encode(str(offset + size).encode()).decode()
        return 200, out

    def compliance_status(self, domain: str) -> dict[str, Any]:
        ok = {"status": "COMPLIANT"}
        return self.compliance.get(domain) or {
            "name": f"domains/{domain}/complianceStatus",
            "complianceData": {
                "domainId": domain,
                "rowData": [{"requirement": r, "status": ok} for r in
                            ("SPF", "DKIM", "SPF_AND_DKIM", "DMARC_POLICY", "DMARC_ALIGNMENT",
                             "MESSAGE_FORMATTING", "DNS_RECORDS", "ENCRYPTION",
                             "USER_REPORTED_SPAM_RATE")],
                "oneClickUnsubscribeVerdict": {"status": ok},
                "honorUnsubscribeVerdict": {"status": ok}}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _authorised(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {api.token}":
                    return True
                self._send(401, _error(401, "UNAUTHENTICATED", "missing or bad credentials"))
                return False

            def do_POST(self) -> None:
                raw = self._body()
                if self.path == "/token":
                    form = parse_qs(raw.decode())
                    api.requests.append({"method": "POST", "path": self.path, "form": form})
                    ok = form.get("grant_type") == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
                    return self._send(200 if ok else 400, {"access_token": api.token,
                                                           "expires_in": 3600,
                                                           "token_type": "Bearer"})
                body = json.loads(raw or b"{}")
                api.requests.append({"method": "POST", "path": self.path, "body": body,
                                     "auth": self.headers.get("Authorization")})
                if not self._authorised():
                    return None
                m = _QUERY.match(self.path)
                if not m:
                    return self._send(404, _error(404, "NOT_FOUND", self.path))
                self._send(*api.query(m.group(1), body))

            def do_GET(self) -> None:
                api.requests.append({"method": "GET", "path": self.path,
                                     "auth": self.headers.get("Authorization")})
                if not self._authorised():
                    return None
                m = _COMPLIANCE.match(self.path)
                if not m:
                    return self._send(404, _error(404, "NOT_FOUND", self.path))
                self._send(200, api.compliance_status(m.group(1)))

        return Handler


def _error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
