"""The campaign report: per campaign, step and mailbox, what is queued, sent, failed, suppressed
(an opt-out) or cancelled (the lead's enrolment stopped)."""

from __future__ import annotations

import json
from typing import Any

from outreach import db
from outreach.logutil import mask


def collect(url: str) -> dict[str, Any]:
    """Return the report as a dict: ``rows`` (per campaign/step/mailbox counts), ``mailboxes``
    (today's sends against the limit, pause status), ``send_log`` total, ``last_import`` and
    ``held`` (leads a step is not queued for because they lack a field it requires: campaign,
    step, missing, leads)."""
    with db.connect(url, autocommit=True) as conn:
        rows = db.run(conn, "report_by_step")
        mailboxes = db.run(conn, "report_mailboxes", {"now": None})
        totals = db.one(conn, "report_totals")
        last_import = db.one(conn, "import_run_latest", {"kind": "leads"})
        held = db.run(conn, "report_missing_fields", {"campaign_key": None})
    for m in mailboxes:
        m["address"] = mask(m["address"])
    return {"rows": rows, "mailboxes": mailboxes, "totals": totals,
            "last_import": last_import, "held": held}


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(x) for x in r)) for r in rows]
    return "\n".join(lines)


def render_text(report: dict[str, Any]) -> str:
    """Return the report as text tables."""
    cols = ["queued", "sending", "sent", "failed", "unconfirmed", "suppressed", "cancelled"]
    parts = ["Emails by campaign, step and mailbox"]
    parts.append(_table(["campaign", "step", "mailbox"] + cols + ["failed by reason"], [
        [r["campaign"], r["step"] if r["step"] is not None else r["template"], r["mailbox_id"]]
        + [r[c] for c in cols] + [r["failed_reasons"] or "-"]
        for r in report["rows"]]))
    parts.append("\nMailboxes today (local day)")
    parts.append(_table(["mailbox", "address", "status", "sent today", "limit today", "reason"], [
        [m["id"], m["address"], m["status"], m["used_today"],
         f"{m['daily_limit']} (campaigns; transactional mail not held)" if m["transactional"]
         else m["daily_limit"], m["paused_reason"] or "-"]
        for m in report["mailboxes"]]))
    if report.get("held"):
        from outreach.queue import held_line

        parts.append("\nNot queued: leads lacking a field the step requires")
        parts += [f"  {held_line(h)}" for h in report["held"]]
    t = report["totals"] or {}
    parts.append(f"\nsend log entries: {t.get('send_log', 0)}; emails: {t.get('emails', 0)}")
    return "\n".join(parts)


def render_json(report: dict[str, Any]) -> str:
    """Return the report as JSON."""
    return json.dumps(report, default=str, indent=2)
