"""How far each campaign is, and when its queued emails are expected out (the campaign page's
progress table), by the pacing rule itself: docs/explanation/pacing.md."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from outreach.store import mailboxes as mailboxes_store
from outreach.store import reports
from outreach.store._run import Conn


def mailbox_finish(queued: int, quota: mailboxes_store.MailboxQuota, interval: dt.timedelta | None,
                   now: dt.datetime) -> dt.datetime | None:
    """Return when a mailbox's ``queued`` rows are expected out (UTC), or ``None`` when it is
    paused. Pure: ``quota`` is its ``mailbox_remaining_today`` at ``now``.

    :param interval: the send DAG's run interval; ``None``: no pacing (a run sends what today
        allows).
    """
    if quota.status != "active":
        return None
    if queued <= 0:
        return now
    step = interval or dt.timedelta(0)
    share = quota.run_share if interval and quota.run_share else max(quota.remaining, 1)
    runs_today = max(quota.runs_left, 1) if interval else 1
    today = min(quota.remaining, share * runs_today)
    if queued <= today:
        return now + step * math.ceil(queued / share)
    days = math.ceil((queued - today) / max(quota.daily_limit, 1))
    # The last day's window end: an upper bound for that day.
    return max(quota.window_end or now, now) + dt.timedelta(days=days)


def campaign_progress(conn: Conn, *, interval: dt.timedelta | None,
                      now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Return per campaign ``{campaign, name, status, sent, queued, expected_finish}``; the finish is an
    ISO timestamp (UTC), ``None`` with nothing queued, or ``"paused"`` / ``"mailbox paused"``.

    :param interval: the send DAG's run interval (``Settings.send_interval``).
    :param now: a fixed clock (UTC); default now."""
    now = now or dt.datetime.now(dt.UTC)
    rows = reports.report_campaign_progress(conn)
    per_mailbox: dict[int, int] = {}
    for r in rows:
        if r.mailbox_id is not None and r.queued:
            per_mailbox[r.mailbox_id] = per_mailbox.get(r.mailbox_id, 0) + r.queued
    finish = {m: mailbox_finish(n, mailboxes_store.mailbox_remaining_today(
        conn, mailbox_id=m, now=now, interval=interval, gap_seconds=None, gap_jitter=None,
        horizon=None), interval, now) for m, n in per_mailbox.items()}
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = out.setdefault(r.campaign, {"campaign": r.campaign, "name": r.name,
                                        "status": r.status, "sent": 0, "queued": 0,
                                        "finishes": []})
        c["sent"] += r.sent
        c["queued"] += r.queued
        if r.mailbox_id is not None and r.queued:
            c["finishes"].append(finish[r.mailbox_id])
    for c in out.values():
        ends = c.pop("finishes")
        if not c["queued"]:
            c["expected_finish"] = None
        elif c["status"] != "active":
            c["expected_finish"] = c["status"]
        elif any(e is None for e in ends):
            c["expected_finish"] = "mailbox paused"
        else:
            c["expected_finish"] = max(ends).astimezone(dt.UTC).isoformat(timespec="minutes")
    return list(out.values())
