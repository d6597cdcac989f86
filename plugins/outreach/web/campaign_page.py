"""The campaign page: per campaign the funnel by step and each step's A/B variants (their figures,
reply rates with 95 % intervals and the verdict), per mailbox sends per day against its cap
and warm-up line, bounce and complaint rates, the Postmaster spam rate (unknown days are gaps,
never 0) with the 0.1 % line, paused state with who and why, and the unconfirmed list.

Every figure comes from :func:`outreach.report.collect`, the same named queries as
``outreach report --json``. Charts are drawn by Chart.js (MIT, vendored in ``static/`` with its
licence; the page loads nothing from the internet). A FastAPI app; ``plugins/outreach_plugin.py``
mounts it in the Airflow API server behind Airflow's login (``dependencies``). Lead data is
hostile: every value is HTML-escaped, and the JSON the charts read is embedded so that it can
never close its ``<script>`` element.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Module level: FastAPI resolves the route signatures' annotations (strings here) in this module.
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

STATIC = Path(__file__).resolve().parent / "static"
FUNNEL = ("enrolled", "queued", "sent", "replied", "bounced", "unsubscribed", "unconfirmed",
          "failed", "complained", "sender_blocked", "stopped_domain_reply", "stopped_auto_reply")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _pct(fraction: float | None) -> str:
    return "–" if fraction is None else f"{fraction * 100:.2f} %"


def _table(headers: Sequence[str], rows: list[list[tuple[str, Any]]], table_id: str) -> str:
    """Rows of ``(data-k key, value)`` cells; the key lets a test read each figure."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td data-k="{_e(k)}">{_e(v)}</td>' for k, v in r) + "</tr>"
                   for r in rows)
    return f'<table id="{_e(table_id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


VARIANT_FIGURES = ("sent", "replied", "bounced", "unsubscribed", "complained")


def _variants(ab: dict[str, Any]) -> str:
    """One step's A/B variants (an entry of the report's ``variants``): the figures, the reply
    rate with its 95 % interval, and the plain verdict."""
    key = f"variants.{ab['campaign']}.{ab['step']}"
    table = _table(["variant", *VARIANT_FIGURES, "reply rate", "95 % interval"], [
        [(f"{key}.{v['variant']}.variant", v["variant"])]
        + [(f"{key}.{v['variant']}.{k}", v[k]) for k in VARIANT_FIGURES]
        + [(f"{key}.{v['variant']}.reply_rate", _pct(v["reply_rate"])),
           (f"{key}.{v['variant']}.interval", "–" if v["reply_rate"] is None else
            f"{_pct(v['reply_rate_low'])} to {_pct(v['reply_rate_high'])}")]
        for v in ab["variants"]], f"variants-{ab['campaign']}-{ab['step']}")
    return (f"<h3>Step {_e(ab['step'])}: A/B variants</h3>{table}"
            f'<p data-k="{_e(key)}.verdict">{_e(ab["verdict"])}</p>')


AUDIT_SHOWN = 10
"""How many audit rows the page shows per campaign (and in the table of all decisions)."""


def _audit_table(rows: list[dict[str, Any]], table_id: str) -> str:
    """The audit rows as a table: when (UTC), who, through what, what, target, why."""
    def when(at: Any) -> str:
        return f"{at:%Y-%m-%d %H:%M} UTC" if hasattr(at, "strftime") else str(at)

    return _table(["when", "who", "via", "action", "target", "why"], [
        [(f"{table_id}.{a['id']}.at", when(a["at"])), (f"{table_id}.{a['id']}.actor", a["actor"]),
         (f"{table_id}.{a['id']}.via", a["via"]), (f"{table_id}.{a['id']}.action", a["action"]),
         (f"{table_id}.{a['id']}.target",
          " ".join(str(x) for x in (a["target_kind"], a["target_key"] or a["target_id"])
                   if x is not None)),
         (f"{table_id}.{a['id']}.reason", a["reason"] or "")] for a in rows], table_id)


def render_page(report: dict[str, Any], base: str = "") -> str:
    """Return the page's HTML for a report from :func:`outreach.report.collect`.

    :param base: the URL prefix the app is mounted at (for its static files).
    """
    parts = ["<h1>Campaigns</h1>"]
    progress = {p["campaign"]: p for p in report.get("progress", [])}
    parts.append("<p>Expected finish: when the emails queued so far are out under each "
                 "mailbox's daily cap, warm-up and pacing (later steps are queued as they fall "
                 "due). Times in UTC.</p>")
    parts.append(_table(["campaign", "name", "status", "sent", "queued", "expected finish"], [
        [(f"progress.{p['campaign']}.{k}", p[k] if p[k] is not None else "–")
         for k in ("campaign", "name", "status", "sent", "queued", "expected_finish")]
        for p in progress.values()], "progress"))
    campaigns = sorted({f["campaign"] for f in report["funnel"]})
    for c in campaigns:
        steps = [f for f in report["funnel"] if f["campaign"] == c]
        name = progress.get(c, {}).get("name") or c
        parts.append(f"<h2>Campaign {_e(name)} <small>({_e(c)})</small></h2>")
        parts.append(_table(["step", *FUNNEL], [
            [(f"funnel.{c}.{f['step']}.step", f["step"])]
            + [(f"funnel.{c}.{f['step']}.{k}", f[k]) for k in FUNNEL] for f in steps],
            f"funnel-{c}"))
        parts.append(f'<div class="chart"><canvas data-funnel="{_e(c)}"></canvas></div>')
        for ab in (v for v in report.get("variants", []) if v["campaign"] == c):
            parts.append(_variants(ab))
        decisions = [a for a in report.get("audit", []) if a["campaign_key"] == c][:AUDIT_SHOWN]
        parts.append(f"<h3>Last decisions about {_e(c)}</h3>")
        parts.append(_audit_table(decisions, f"audit-{c}") if decisions
                     else "<p>No operator decision recorded.</p>")
    reasons = [r for r in report["rows"] if r.get("failure_reasons")]
    if reasons:
        parts.append("<h2>Delivery failures by reason</h2>")
        parts.append(_table(["campaign", "step", "mailbox", "reasons"], [
            [(f"reasons.{i}.campaign", r["campaign"]), (f"reasons.{i}.step", r["step"] or ""),
             (f"reasons.{i}.mailbox", r["mailbox_id"]),
             (f"reasons.{i}.reasons", r["failure_reasons"])] for i, r in enumerate(reasons)],
            "failure-reasons"))
    if report.get("inbound"):
        parts.append("<h2>Inbound mail</h2>")
        parts.append(_table(["class", "reason", "messages", "changed something"], [
            [(f"inbound.{i}.class", r["class"]), (f"inbound.{i}.reason", r["reason"]),
             (f"inbound.{i}.messages", r["messages"]), (f"inbound.{i}.applied", r["applied"])]
            for i, r in enumerate(report["inbound"])], "inbound"))
    parts.append("<h2>Mailboxes</h2>")
    parts.append(_table(
        ["mailbox", "address", "status", "paused by", "paused at", "why", "sends (30 days)",
         "hard bounces", "bounce rate", "complaints", "complaint rate"],
        [[(f"mailbox.{h['id']}.name", h["name"]), (f"mailbox.{h['id']}.address", h["address"]),
          (f"mailbox.{h['id']}.status", h["status"]),
          (f"mailbox.{h['id']}.paused_by", h["paused_by"] or ""),
          (f"mailbox.{h['id']}.paused_at", h["paused_at"] or ""),
          (f"mailbox.{h['id']}.paused_reason", h["paused_reason"] or ""),
          (f"mailbox.{h['id']}.sends", h["sends"]),
          (f"mailbox.{h['id']}.hard_bounces", h["hard_bounces"]),
          (f"mailbox.{h['id']}.bounce_rate", _pct(h["bounce_rate"])),
          (f"mailbox.{h['id']}.complaints", h["complaints"]),
          (f"mailbox.{h['id']}.complaint_rate", _pct(h["complaint_rate"]))]
         for h in report["health"]], "mailboxes"))
    for h in report["health"]:
        parts.append(f"<h3>{_e(h['name'])}: sends per day, cap and warm-up (30 days)</h3>"
                     f'<div class="chart"><canvas data-sends="{h["id"]}"></canvas></div>'
                     f"<h3>{_e(h['name'])}: Postmaster spam rate (gaps: no data)</h3>"
                     f'<div class="chart"><canvas data-spam="{h["id"]}"></canvas></div>')
    if report.get("audit"):
        parts.append("<h2>Recent operator decisions (all)</h2>")
        parts.append(_audit_table(report["audit"][:AUDIT_SHOWN], "audit"))
    parts.append(f"<h2>Unconfirmed emails ({len(report['unconfirmed'])})</h2>")
    parts.append("<p>Check the mailbox's Sent Items, then answer the Required Action "
                 "(outreach_unconfirmed_review) or trigger outreach_resolve_unconfirmed.</p>")
    parts.append(_table(
        ["id", "Sent-folder evidence", "campaign", "step", "recipient", "mailbox", "Message-ID",
         "handed over", "stage", "reply"],
        [[(f"unconfirmed.{u['id']}.id", u["id"]), (f"unconfirmed.{u['id']}.evidence", u["evidence"])]
         + [(f"unconfirmed.{u['id']}.{k}", u[k] if u[k] is not None else "") for k in (
             "campaign", "step", "recipient", "mailbox", "message_id")]
         + [(f"unconfirmed.{u['id']}.handed_over", u["handed_over_at"] or u["claimed_at"] or ""),
            (f"unconfirmed.{u['id']}.stage", u["stage"]), (f"unconfirmed.{u['id']}.error", u["error"])]
         for u in report["unconfirmed"]], "unconfirmed"))
    data = json.dumps({"funnel": report["funnel"], "days": report["days"],
                       "health": report["health"], "threshold": report["spam_rate_threshold"]},
                      default=str)
    # '<', '>' and '&' as JSON escapes: the data can never end the script element.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>outreach: campaigns</title>
<link rel="stylesheet" href="{_e(base)}/static/campaign_page.css"></head>
<body>{''.join(parts)}
<script id="report-data" type="application/json">{data}</script>
<script src="{_e(base)}/static/chart.umd.min.js"></script>
<script src="{_e(base)}/static/campaign_page.js"></script>
</body></html>"""


class AddSlash:
    """ASGI middleware for Airflow's root app (a plugin's ``fastapi_root_middlewares``): a
    request for exactly ``path`` (the mount prefix, no trailing slash, which a mounted app never
    sees) is redirected (307) to ``path/``, so ``/outreach-campaigns`` answers like
    ``/outreach-campaigns/``.

    :param path: the mount prefix, without a trailing slash.
    """

    def __init__(self, app: Any, path: str) -> None:
        self.app, self.path = app, path.rstrip("/")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Redirect a request for exactly the prefix; pass everything else on."""
        if scope.get("type") == "http" and scope.get("path") == self.path:
            from starlette.responses import RedirectResponse

            query = scope.get("query_string", b"").decode("latin-1")
            await RedirectResponse(self.path + "/" + (f"?{query}" if query else ""),
                                   status_code=307)(scope, receive, send)
            return
        await self.app(scope, receive, send)


LOGIN = "/api/v2/auth/login"
"""Airflow's login entry (``airflow/api_fastapi/core_api/routes/public/auth.py``: redirects to
the auth manager's login page, then back to ``next``)."""


def create_app(database_url: Callable[[], str], *, dependencies: Sequence[Any] = (),
               accounts: Callable[[str], Any] | None = None) -> Any:
    """Return the FastAPI app of the campaign page.

    :param database_url: returns the outreach database URL; called per request (never at import).
    :param dependencies: FastAPI dependencies of every route (the Airflow plugin passes Airflow's
        authentication, so the page and its files are behind Airflow's login). A browser
        (``Accept: text/html``) without a session is redirected to Airflow's login page and
        back; anything else gets the 401.
    :param accounts: opens IMAP accounts for the unconfirmed emails' Sent-folder evidence, the
        same as the Required Action's (:func:`outreach.airflow.connections.imap_account`).
    Routes: ``GET /`` the page, ``GET /report.json`` the report it shows, ``GET /static/{name}``
    its vendored script, stylesheet and the Chart.js licence.
    """
    from outreach.report import collect, render_json

    app = FastAPI(title="outreach campaigns", dependencies=list(dependencies), docs_url=None,
                  redoc_url=None, openapi_url=None)
    files = {p.name: p for p in STATIC.iterdir() if p.is_file()} if STATIC.is_dir() else {}

    @app.exception_handler(HTTPException)
    async def to_login(request: Request, exc: HTTPException) -> Response:
        from urllib.parse import urlencode

        from fastapi.exception_handlers import http_exception_handler
        from fastapi.responses import RedirectResponse

        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(f"{LOGIN}?{urlencode({'next': str(request.url)})}",
                                    status_code=303)
        return await http_exception_handler(request, exc)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        base = request.scope.get("root_path", "").rstrip("/")
        return HTMLResponse(render_page(collect(database_url(), accounts=accounts), base),
                            headers={"Cache-Control": "no-store"})

    @app.get("/report.json")
    def report_json() -> Response:
        return Response(render_json(collect(database_url(), accounts=accounts)),
                        media_type="application/json", headers={"Cache-Control": "no-store"})

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        path = files.get(name)  # only the files shipped in static/: no path is built from input
        if path is None:
            raise HTTPException(status_code=404)
        return FileResponse(path)

    return app
