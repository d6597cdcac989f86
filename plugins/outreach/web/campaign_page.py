"""The campaign page: funnel, A/B variants, per-mailbox sends, rates and spam rate, pauses and the
unconfirmed list, and at ``preview`` a step's preview exactly as ``outreach campaign preview``
prints it (the HTML part in a sandboxed iframe, :data:`FRAME_CSP`).

Every figure comes from :func:`outreach.report.collect`; Chart.js is vendored (nothing loaded from
the internet). Mounted in the Airflow API server behind its login. Lead data is hostile: every
value is escaped and the embedded JSON can never close its ``<script>``."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

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


PREVIEW_SAMPLE = 10
"""How many enrolled leads the preview lists when no lead is chosen (the first by lead id)."""

FRAME_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
"""The Content-Security-Policy of the previewed HTML part (a ``<meta>`` at the top of the
iframe's ``srcdoc``): nothing is loaded from anywhere (a tracking pixel or remote image would
tell its owner the message was looked at) but inline styles and ``data:`` images."""

PAGE_CSP = ("default-src 'none'; img-src data:; style-src 'self' 'unsafe-inline'; "
            "form-action 'self'; frame-ancestors 'self'")
"""The Content-Security-Policy header of the preview page: no script at all (the page needs
none), its stylesheet, and — inherited by the ``srcdoc`` iframe — no remote load."""


def _campaign_keys(report: dict[str, Any]) -> list[str]:
    return sorted({p["campaign"] for p in report.get("progress", [])}
                  | {f["campaign"] for f in report["funnel"]})


def _preview_form(keys: Sequence[str], base: str, key: str | None = None,
                  lead: str | None = None, step: int = 1) -> str:
    """The form that asks for a preview: campaign, lead address (empty: a list of sample
    leads), step. A GET form: the preview is a link that can be shared and reloaded."""
    options = "".join(f'<option value="{_e(k)}"{" selected" if k == key else ""}>{_e(k)}</option>'
                      for k in keys)
    return (f'<form id="preview-form" method="get" action="{_e(base)}/preview">'
            f'<label>campaign <select name="campaign">{options}</select></label> '
            f'<label>lead address <input name="lead" type="email" size="40" '
            f'value="{_e(lead or "")}" placeholder="empty: the first {PREVIEW_SAMPLE} leads">'
            f'</label> <label>step <input name="step" type="number" min="1" value="{step}">'
            f'</label> <button type="submit">Preview</button></form>')


def _item_html(item: Any, step: int, base: str, key: str) -> str:
    """One previewed lead: the CLI's output, the header fields, the text part, the HTML part in
    a sandboxed iframe (``sandbox=""``: no script, no same origin, no form, no navigation)."""
    from outreach.preview import display_header, item_text, message_parts

    link = (f'{_e(base)}/preview?campaign={_e(quote(key))}&amp;step={step}'
            f'&amp;lead={_e(quote(item.address))}')
    if item.skip is not None:
        return (f'<section class="preview-item" data-address="{_e(item.address)}">'
                f'<h3><a href="{link}">{_e(item.address)}</a>: skipped</h3>'
                f'<p class="skip">{_e(item.skip)}</p></section>')
    parts = message_parts(item.wire)
    headers = "".join(f"<tr><th>{_e(n)}</th><td>{_e(display_header(n, v))}</td></tr>"
                      for n, v in parts.headers)
    srcdoc = (f'<meta http-equiv="Content-Security-Policy" content="{FRAME_CSP}">'
              + (parts.html or ""))
    cli = item_text(item, step).decode("utf-8", "replace")
    return (f'<section class="preview-item" data-address="{_e(item.address)}">'
            f'<h3><a href="{link}">{_e(item.address)}</a>: Message-ID '
            f'&lt;{_e(item.message_id)}&gt;</h3>'
            + "".join(f'<p class="note">{_e(n)}</p>' for n in item.notes)
            + f'<table class="headers">{headers}</table>'
            f'<h4>Text part</h4><pre class="text-part">{_e(parts.text or "")}</pre>'
            f'<h4>HTML part (sandboxed: no script, nothing loaded)</h4>'
            f'<iframe class="html-part" sandbox="" referrerpolicy="no-referrer" '
            f'csp="{_e(FRAME_CSP)}" srcdoc="{_e(srcdoc)}"></iframe>'
            f'<details><summary>As <code>outreach campaign preview --raw</code> prints it</summary>'
            f'<pre class="cli">{_e(cli)}</pre></details></section>')


def render_preview(keys: Sequence[str], base: str, key: str | None, lead: str | None, step: int,
                   items: Sequence[Any], error: str | None = None) -> str:
    """Return the preview page's HTML: the form, then per previewed lead :func:`_item_html`, or
    ``error`` (no such campaign, step or lead). Lead data is hostile: every value is escaped,
    the HTML part only ever reaches the page escaped inside ``srcdoc``.

    :param items: :class:`outreach.preview.PreviewItem` of step ``step`` of campaign ``key``.
    """
    body = ["<h1>Preview</h1>", f'<p><a href="{_e(base)}/">back to the campaigns</a></p>',
            _preview_form(keys, base, key, lead, step)]
    if error is not None:
        body.append(f'<p class="error">{_e(error)}</p>')
    elif key is not None:
        title = f"for {lead}" if lead else f"for the first {PREVIEW_SAMPLE} enrolled leads"
        body.append(f"<h2>Campaign {_e(key)}, step {step}, {_e(title)}</h2>")
        if not lead:
            body.append("<p>Choose a lead (its address) to see only its message.</p>")
        body.extend(_item_html(i, step, base, key) for i in items)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>outreach: preview</title>
<link rel="stylesheet" href="{_e(base)}/static/campaign_page.css"></head>
<body>{''.join(body)}</body></html>"""


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
    parts.append('<h2 id="preview">Preview</h2><p>A step exactly as it would be handed over to '
                 "a chosen lead (headers, text, HTML), or why the step would skip the lead; the "
                 "same as <code>outreach campaign preview</code> (<code>--raw</code>: the wire form). "
                 "Nothing is written.</p>")
    parts.append(_preview_form(_campaign_keys(report), base))
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
        waiting = [w for w in report.get("waiting", []) if w["campaign"] == c]
        if waiting:
            parts.append("<h3>Waiting: held back by the contact policy</h3>")
            parts.append(_table(["step", "reason", "emails", "first may go (UTC)"], [
                [(f"waiting.{c}.{i}.step", w["step"]), (f"waiting.{c}.{i}.reason", w["reason"]),
                 (f"waiting.{c}.{i}.emails", w["emails"]),
                 (f"waiting.{c}.{i}.next_at", f"{w['next_at']:%Y-%m-%d %H:%M}"
                  if hasattr(w["next_at"], "strftime") else w["next_at"])]
                for i, w in enumerate(waiting)], f"waiting-{c}"))
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
    """ASGI middleware for Airflow's root app: a request for exactly ``path`` (which a mounted app never
    sees) is redirected (307) to ``path/``.

    :param path: the mount prefix, without a trailing slash."""

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
               accounts: Callable[[str], Any] | None = None,
               settings: Callable[[], Any] | None = None,
               clock: Callable[[], Any] | None = None) -> Any:
    """Return the FastAPI app of the campaign page.

    Routes: ``GET /``, ``GET /report.json``, ``GET /preview?campaign=KEY&lead=ADDRESS&step=S`` (no
    lead: the first :data:`PREVIEW_SAMPLE`; 404 unknown, 422 a failing template or header) and
    ``GET /static/{name}``.

    :param database_url: returns the outreach database URL; called per request (never at import).
    :param dependencies: of every route (Airflow's authentication); a browser without a session is
        redirected to the login page, anything else gets 401.
    :param accounts: opens IMAP accounts for the Sent-folder evidence (as the Required Action).
    :param settings: returns the sender's settings for a preview's List-Unsubscribe; ``None``: 503.
    :param clock: the preview's moment (UTC ``datetime``); default now; fixed: reproducible."""
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

    @app.get("/preview", response_class=HTMLResponse)
    def preview_page(request: Request, campaign: str | None = None, lead: str | None = None,
                     step: int = 1) -> HTMLResponse:
        from outreach import db
        from outreach.message import MessageError
        from outreach.preview import PreviewError, preview
        from outreach.render import RenderError
        from outreach.store import campaigns as campaigns_store

        if settings is None:
            raise HTTPException(status_code=503, detail="preview not configured (no settings)")
        base = request.scope.get("root_path", "").rstrip("/")
        lead = (lead or "").strip() or None
        with db.connect(database_url(), autocommit=True) as conn:
            keys = [c.key for c in campaigns_store.campaign_list(conn)]
        items: list[Any] = []
        error, status = None, 200
        if campaign is not None:
            if step < 1:
                error, status = "the step is a number from 1", 422
            else:
                try:
                    items = preview(database_url(), campaign, settings(), address=lead,
                                    sample=PREVIEW_SAMPLE, step=step,
                                    now=clock() if clock is not None else None)
                except PreviewError as exc:
                    error, status = str(exc), 404
                except (RenderError, MessageError) as exc:  # a template or header failed
                    error, status = f"the message cannot be built: {exc}", 422
        return HTMLResponse(render_preview(keys, base, campaign, lead, step, items, error),
                            status_code=status, headers={"Cache-Control": "no-store",
                                                         "Content-Security-Policy": PAGE_CSP,
                                                         "Referrer-Policy": "no-referrer"})

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        path = files.get(name)  # only the files shipped in static/: no path is built from input
        if path is None:
            raise HTTPException(status_code=404)
        return FileResponse(path)

    return app
