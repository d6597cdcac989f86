"""What a launch approval shows (issue 24, item 4): the facts of a campaign awaiting approval and
the Markdown of ``outreach_campaign_approval``'s Required Action.

Leads to contact and skipped, the first days' volume per mailbox, the DNS preflight per domain
and sample renders, from the functions that will queue and send it; nothing is written, lead data
made inert (masked, fenced, escaped). docs/howto/launch-a-campaign.md."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from outreach import db
from outreach.logutil import mailbox_name, mask
from outreach.preview import preview, skip_reason
from outreach.store import campaigns as campaigns_store
from outreach.store import mailboxes as mailboxes_store

DAYS = 5
"""How many days of volume the approval shows."""

SAMPLES = 2
"""How many sample renders the approval shows."""


def md_cell(value: Any) -> str:
    """Return ``value`` as an inert Markdown table cell: one line, Markdown characters escaped,
    at most 300 characters."""
    text = "" if value is None else " ".join(str(value).split())
    for ch in "\\|`*_[]<>#":
        text = text.replace(ch, "\\" + ch)
    return text[:300]


def md_code(value: Any) -> str:
    """Return ``value`` as an inert Markdown code span (no backtick, pipe or line break)."""
    text = "".join(ch for ch in str(value) if ch not in "`|\\\n\r")[:300]
    return f"`{text}`"


def _fence(text: str) -> str:
    """``text`` in a code fence longer than any backtick run in it (so it cannot be closed)."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def awaiting(url: str, key: str | None = None) -> list[dict[str, Any]]:
    """Return the campaigns awaiting approval (or only ``key``), oldest first, each with its
    latest submission: ``{id, key, name, status, content_version, approved_content_version,
    timezone, send_days, submitted_event_id, submitted_by, submitted_reason, submitted_at}``."""
    with db.connect(url, autocommit=True) as conn:
        return [asdict(c) for c in campaigns_store.campaign_awaiting_list(conn, key=key)]


def _render(wire: bytes, address: str) -> str:
    """The sample as a reader sees it: the headers that matter and the text part, the lead's
    address masked."""
    msg = email.message_from_bytes(wire, policy=email.policy.default)
    lines = [f"{h}: {msg[h]}" for h in ("From", "To", "Subject", "List-Unsubscribe") if msg[h]]
    body = msg.get_body(preferencelist=("plain",))
    text = body.get_content() if body is not None else ""
    out = "\n".join(lines) + "\n\n" + text.strip()
    return out.replace(address, mask(address))


def gather(url: str, campaign: dict[str, Any], settings: Any, *,
           preflight: Callable[[list[dict[str, Any]]], dict[str, str]] | None = None,
           days: int = DAYS, samples: int = SAMPLES,
           now: dt.datetime | None = None) -> dict[str, Any]:
    """Gather what approving ``campaign`` (a row of :func:`awaiting`) will do.

    :param settings: :class:`outreach.settings.Settings` (the preview builds with it).
    :param preflight: mailboxes → ``{domain: "PASS"|"WARN"|"FAIL: checks"|"not checked: why"}``;
        ``None``: not checked.
    :param now: the first day (UTC; default now).
    :returns: ``{campaign, name, content_version, approved_content_version, submitted, enrolled,
        to_contact, skipped: {reason: n}, mailboxes: [{name, status, leads, used_today, volume:
        [(day ISO, n)]}], preflight, samples: [{lead (masked), text, notes}]}``; ``volume`` fills
        each send day's limit, the rest spilling onto the next.
    :raises outreach.preview.PreviewError: the campaign has no step 1 or no enrolled lead."""
    now = now or dt.datetime.now(dt.UTC)
    key = campaign["key"]
    with db.connect(url, autocommit=True) as conn:
        rows = [asdict(r) for r in campaigns_store.campaign_preview_rows(
            conn, key=key, step=1, address=None, limit=None)]
        mailbox_days = campaigns_store.campaign_mailbox_days(
            conn, campaign_id=campaign["id"], days=days, now=now)
        # Today only what the mailbox has not used yet (its other campaigns' sends count): the
        # cap rule's own figure, without pacing (by the window's end a day's spread reaches it).
        today = {d.mailbox_id: mailboxes_store.mailbox_remaining_today(
            conn, mailbox_id=d.mailbox_id, now=now, interval=None, gap_seconds=None,
            gap_jitter=None, horizon=None) for d in mailbox_days if d.day_index == 0}
    skipped: Counter[str] = Counter()
    per_mailbox: Counter[int] = Counter()
    contact: list[str] = []
    for r in rows:
        why = skip_reason(r)
        if why is None and r["email_status"] not in (None, "queued"):
            why = f"step 1 already {r['email_status']}"
        if why is not None:
            skipped[why] += 1
        else:
            per_mailbox[r["mailbox_id"]] += 1
            contact.append(r["email"])
    mailboxes: dict[int, dict[str, Any]] = {}
    send_days = set(campaign["send_days"] or [])
    for d in mailbox_days:
        m = mailboxes.setdefault(d.mailbox_id, {
            "name": mailbox_name(d.label, d.display_name, d.address), "status": d.status,
            "domain": d.address.rpartition("@")[2], "dkim_selector": d.dkim_selector,
            "dkim_key_conn_id": d.dkim_key_conn_id, "leads": per_mailbox[d.mailbox_id],
            "used_today": today[d.mailbox_id].used if d.mailbox_id in today else 0,
            "left": per_mailbox[d.mailbox_id], "volume": []})
        limit = d.daily_limit if d.status == "active" and d.day.isoweekday() in send_days else 0
        if d.day_index == 0 and d.mailbox_id in today:
            limit = min(limit, today[d.mailbox_id].remaining)
        n = min(limit, m["left"])
        m["left"] -= n
        m["volume"].append((d.day.isoformat(), n))
    renders = []
    for address in contact[:samples]:
        [item] = preview(url, key, settings, address=address, now=now)
        renders.append({"lead": mask(address), "text": _render(item.wire or b"", address),
                        "notes": list(item.notes)})
    checked = preflight([{k: m[k] for k in ("domain", "dkim_selector", "dkim_key_conn_id")}
                         for m in mailboxes.values()]) if preflight else {}
    return {"campaign": key, "name": campaign["name"],
            "content_version": campaign["content_version"],
            "approved_content_version": campaign["approved_content_version"],
            "submitted": {"by": campaign["submitted_by"], "reason": campaign["submitted_reason"],
                          "at": campaign["submitted_at"].isoformat()
                          if campaign["submitted_at"] else None},
            "enrolled": len(rows), "to_contact": len(contact), "skipped": dict(skipped),
            "mailboxes": [{k: v for k, v in m.items() if k != "left"}
                          for m in mailboxes.values()],
            "preflight": checked, "samples": renders}


def markdown(facts: dict[str, Any]) -> str:
    """Return the Required Action's body (Markdown) for :func:`gather`'s ``facts``."""
    sub = facts["submitted"]
    second = facts["approved_content_version"] and (
        facts["approved_content_version"] != facts["content_version"])
    lines = [f"Campaign {md_code(facts['campaign'])} ({md_cell(facts['name'])}), campaign "
             f"content version {md_code(facts['content_version'])}"
             + (f" (approved before: {md_code(facts['approved_content_version'])}: **its "
                "content changed, a second approval**)" if second else "") + ".",
             "", f"Submitted by {md_cell(sub['by'])} at {md_cell(sub['at'])}: "
             f"{md_cell(sub['reason'])}", "",
             "**Approve** makes it active: the next queue-due queues step 1 for the leads below. "
             "**Reject** sends it back to draft with the reason you type.", "",
             f"**{facts['to_contact']} lead(s) to be contacted** by step 1, of "
             f"{facts['enrolled']} enrolled.", ""]
    if facts["skipped"]:
        lines += ["| skipped because | leads |", "|---|---|"]
        lines += [f"| {md_cell(why)} | {n} |" for why, n in sorted(facts["skipped"].items())]
        lines.append("")
    days = [day for day, _ in facts["mailboxes"][0]["volume"]] if facts["mailboxes"] else []
    lines += ["**First days' volume per mailbox** (daily cap and warm-up, on the campaign's send "
              "days; today only what the mailbox has not used yet; a mailbox's limit is shared "
              "with its other campaigns):", "",
              "| mailbox | status | leads | used today | " + " | ".join(days) + " |",
              "|---|---|---|---|" + "---|" * len(days)]
    for m in facts["mailboxes"]:
        lines.append(f"| {md_cell(m['name'])} | {md_cell(m['status'])} | {m['leads']} | "
                     f"{m['used_today']} | " + " | ".join(str(n) for _, n in m["volume"]) + " |")
    lines += ["", "**Preflight per sending domain** (DNS: SPF, DKIM, DMARC, MX):", ""]
    if facts["preflight"]:
        lines += ["| domain | result |", "|---|---|"]
        lines += [f"| {md_cell(d)} | {md_cell(v)} |" for d, v in sorted(facts["preflight"].items())]
    else:
        lines.append("not checked")
    lines += ["", f"**Sample renders** (step 1, as handed over; {len(facts['samples'])}):"]
    for s in facts["samples"]:
        lines += ["", f"Lead {md_cell(s['lead'])}:", ""]
        lines += [f"- {md_cell(note)}" for note in s.get("notes", ())]
        lines += ["", _fence(s["text"])] if s.get("notes") else [_fence(s["text"])]
    return "\n".join(lines)
