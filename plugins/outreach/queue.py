"""Queueing due sequence steps, the reaper, and the send plan.

Each function is one set-based statement (or a read), safe to run twice or concurrently: the
UNIQUE (lead, step) constraint makes a second queue run insert nothing, and the reaper is one
guarded UPDATE.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from outreach import db
from outreach.logutil import log, mask


def queue_due(url: str, *, campaign_key: str | None = None, now: dt.datetime | None = None,
              ) -> dict[str, Any]:
    """Insert the due step of every eligible lead; return ``{"queued": n, "per_mailbox": {id: n}}``.

    :param campaign_key: only this campaign (default all active campaigns).
    :param now: a fixed clock (UTC); default the database clock.
    """
    with db.transaction(url) as conn:
        rows = db.run(conn, "email_queue_due", {"now": now, "campaign_key": campaign_key})
    per_mailbox: dict[int, int] = {}
    for r in rows:
        per_mailbox[r["mailbox_id"]] = per_mailbox.get(r["mailbox_id"], 0) + 1
    log.info("queue-due: queued=%s per_mailbox=%s", len(rows), per_mailbox)
    return {"queued": len(rows), "per_mailbox": per_mailbox}


def reap(url: str, threshold: dt.timedelta, *, now: dt.datetime | None = None) -> list[int]:
    """Fail rows left 'sending' longer than ``threshold`` as unconfirmed; return their ids.

    One guarded UPDATE (status = 'sending' and claimed_at older than the threshold): a row that
    finished meanwhile is never touched.
    """
    with db.transaction(url) as conn:
        rows = db.run(conn, "email_reap_stale", {"threshold": threshold, "now": now})
    for r in rows:
        log.error("email %s unconfirmed: left sending since %s by %s; check Sent Items before "
                  "doing anything", r["id"], r["claimed_at"], r["claimed_by"])
    return [r["id"] for r in rows]


def plan_batches(url: str, batch_size: int, *, max_batches: int = 64,
                 now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Plan the send run: one entry per batch, ``{"mailbox_id", "mailbox", "limit", "label"}``.

    A mailbox gets ``ceil(min(due, remaining today) / batch_size)`` batches; paused mailboxes get
    none. Each batch claims on its own, so a plan that over-estimates only yields empty batches.
    """
    out: list[dict[str, Any]] = []
    with db.connect(url, autocommit=True) as conn:
        for mb in db.run(conn, "email_plan_mailboxes", {"now": now}):
            if mb["status"] != "active":
                log.info("plan: mailbox %s (%s) is paused; %s due rows wait", mb["mailbox_id"],
                         mask(mb["address"]), mb["due"])
                continue
            quota = db.one(conn, "mailbox_remaining_today", {"mailbox_id": mb["mailbox_id"], "now": now})
            n = min(mb["due"], max(0, quota["daily_limit"] - quota["used"]))
            for i in range(math.ceil(n / batch_size)):
                out.append({"mailbox_id": mb["mailbox_id"], "mailbox": mask(mb["address"]),
                            "limit": batch_size,
                            "label": f"mailbox {mb['mailbox_id']} ({mask(mb['address'])}) #{i + 1}"})
    return out[:max_batches]
