"""The campaign report: per campaign, step and mailbox, what is queued, sent, failed, suppressed
(an opt-out) or cancelled (the lead's enrolment stopped)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from outreach import db
from outreach.logutil import mask
from outreach.store import audit_logs, import_runs, reports
from outreach.store import mailboxes as mailboxes_store

HISTORY_DAYS = 30
"""Days of per-mailbox history in the report (the campaign page's charts), today included."""


AUDIT_ROWS = 100
"""How many of the latest audit rows the report (and so the campaign page) carries."""


def collect(url: str, *, now: Any = None, accounts: Any = None) -> dict[str, Any]:
    """Return the report as a dict: what ``outreach report --json`` and the campaign page show.

    Keys: ``rows``, ``totals``, ``last_import``, ``held``, ``waiting`` (the contact policy's holds),
    ``mailboxes``, ``this_run`` (:func:`outreach.queue.run_allowances`), ``funnel``, ``inbound``,
    ``health`` (over :data:`HISTORY_DAYS` days; rates as fractions), ``days`` (spam rate ``None``
    when unknown, never 0), ``spam_rate_threshold``, ``unconfirmed`` (masked), ``progress``
    (:func:`outreach.progress.campaign_progress`), ``variants`` (:func:`ab_variants`) and ``audit``
    (the last :data:`AUDIT_ROWS` decisions, masked); each from its ``report_*`` query.

    :param now: a fixed clock (UTC) for the day-based figures; default the database clock.
    :param accounts: opens IMAP accounts for the Sent-folder evidence; ``None``: not searched."""
    import datetime as dt

    from outreach.health import HealthSettings
    from outreach.logutil import mailbox_name
    from outreach.progress import campaign_progress
    from outreach.settings import Settings

    window = dt.timedelta(days=HISTORY_DAYS)
    with db.connect(url, autocommit=True) as conn:
        reports.report_jit_off(conn)
        # The report is JSON (``outreach report --json``, the campaign page): rows as dicts.
        rows = [asdict(r) for r in reports.report_by_step(conn)]
        mailboxes = [asdict(r) for r in reports.report_mailboxes(conn, now=now)]
        totals = asdict(reports.report_totals(conn))
        latest = import_runs.import_run_latest(conn, kind="leads")
        last_import = asdict(latest) if latest is not None else None
        held = [asdict(r) for r in reports.report_missing_fields(conn, campaign_key=None)]
        waiting = [asdict(r) for r in reports.report_waiting(conn, campaign_key=None)]
        funnel = [asdict(r) for r in reports.report_funnel(conn)]
        for f in funnel:
            f.pop("variant")
        variants = ab_variants(reports.report_funnel(conn, by_variant=True))
        inbound = [{"class": r.class_, "reason": r.reason, "messages": r.n, "applied": r.applied}
                   for r in reports.report_inbound_counts(conn)]
        health = [asdict(r) for r in reports.report_mailbox_health(conn, now=now, window=window)]
        days = [asdict(r) for r in reports.report_mailbox_days(conn, now=now, days=HISTORY_DAYS)]
        names = {r.id: mailbox_name(r.label, r.display_name, r.address)
                 for r in mailboxes_store.mailbox_names(conn)}
        interval = Settings.from_env(unsubscribe=False).send_interval
        progress = campaign_progress(conn, now=now, interval=interval)
        audit = [asdict(r) for r in audit_logs.audit_log_list(conn, campaign_key=None, since=None,
                                                              limit=AUDIT_ROWS)]
    for m in mailboxes:
        m["address"] = mask(m["address"])
        m["name"] = names.get(m["id"], m["address"])
    for h in health:
        h["name"] = names.get(h["id"], "")
        h["address"] = mask(h.pop("address"))
        h.pop("label"), h.pop("display_name")
        h["bounce_rate"] = h["hard_bounces"] / h["sends"] if h["sends"] else None
        h["complaint_rate"] = h["complaints"] / h["sends"] if h["sends"] else None
    from outreach.queue import run_allowances
    from outreach.resolve import unconfirmed_details

    this_run = [{**asdict(a), "name": names.get(a.mailbox_id, a.address), "line": a.line()}
                for a in run_allowances(url, interval=interval, now=now)]

    return {"rows": rows, "mailboxes": mailboxes, "totals": totals, "last_import": last_import,
            "held": held, "waiting": waiting, "this_run": this_run, "funnel": funnel, "inbound": inbound,
            "health": health, "days": days,
            "spam_rate_threshold": HealthSettings.from_env().spam_rate_threshold,
            "unconfirmed": unconfirmed_details(url, accounts=accounts), "progress": progress,
            "variants": variants, "audit": audit}


VARIANT_COUNTS = ("sent", "replied", "bounced", "unsubscribed", "complained")
"""What the report shows per A/B variant (each counted by ``report_funnel``'s rules)."""


def ab_variants(rows: list[reports.FunnelStep]) -> list[dict[str, Any]]:
    """Group ``report_funnel(by_variant=True)`` rows into one entry per campaign step with variants.

    Each ``{"campaign", "step", "variants": [{"variant", "sent", …, "reply_rate", "reply_rate_low",
    "reply_rate_high"}], "best", "worst", "z", "p", "significant", "verdict"}``: Wilson's 95 %
    interval, the pooled two-proportion z-test (:func:`outreach.abtest.compare_variants`)."""
    from outreach.abtest import compare_variants

    steps: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r.variant is not None:
            steps.setdefault((r.campaign, r.step), []).append(
                {"variant": r.variant, **{k: getattr(r, k) for k in VARIANT_COUNTS}})
    return [{"campaign": campaign, "step": step, "variants": vs, **compare_variants(vs)}
            for (campaign, step), vs in steps.items()]


def _rate(rate: float | None, low: float | None, high: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%} ({low:.1%} to {high:.1%})"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    widths = ([max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)] if rows
              else [len(h) for h in headers])
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(str(x) for x in r)) for r in rows]
    return "\n".join(lines)


def render_text(report: dict[str, Any]) -> str:
    """Return the report as text tables."""
    cols = ["queued", "sending", "sent", "failed", "unconfirmed", "suppressed", "cancelled"]
    parts = ["Emails by campaign, step and mailbox"]
    parts.append(_table(["campaign", "step", "mailbox"] + cols + ["failed by kind",
                                                                  "delivery failures by reason"], [
        [r["campaign"], r["step"] if r["step"] is not None else r["template"], r["mailbox_id"]]
        + [r[c] for c in cols] + [r["failed_reasons"] or "-", r.get("failure_reasons") or "-"]
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
    if report.get("waiting"):
        parts.append("\nWaiting: queued emails the contact policy holds back")
        parts.append(_table(["campaign", "step", "reason", "emails", "first may go (UTC)"], [
            [w["campaign"], w["step"], w["reason"], w["emails"], f"{w['next_at']:%Y-%m-%d %H:%M}"]
            for w in report["waiting"]]))
    if any(a["hold"] for a in report.get("this_run") or []):
        parts.append("\nHeld this send run: due emails a mailbox may not send now")
        parts += [f"  {a['line']}" for a in report["this_run"] if a["hold"]]
    if report.get("inbound"):
        parts.append("\nInbound mail by class and reason (outreach lead show ADDRESS: one lead's)")
        parts.append(_table(["class", "reason", "messages", "changed something"], [
            [i["class"], i["reason"] or "-", i["messages"], i["applied"]]
            for i in report["inbound"]]))
    for step in report.get("variants") or []:
        parts.append(f"\nA/B variants: {step['campaign']} step {step['step']} (reply rate, 95 % "
                     "interval)")
        parts.append(_table(["variant", *VARIANT_COUNTS, "reply rate"], [
            [v["variant"], *(v[k] for k in VARIANT_COUNTS),
             _rate(v["reply_rate"], v["reply_rate_low"], v["reply_rate_high"])]
            for v in step["variants"]]))
        parts.append(f"  {step['verdict']}")
    t = report["totals"] or {}
    parts.append(f"\nsend log entries: {t.get('send_log', 0)}; emails: {t.get('emails', 0)}")
    return "\n".join(parts)


def render_json(report: dict[str, Any]) -> str:
    """Return the report as JSON."""
    return json.dumps(report, default=str, indent=2)
