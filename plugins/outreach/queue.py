"""Queueing due sequence steps, the reaper, and the send plan.

Each function is one set-based statement (or a read; queue-due one per part of the leads), safe to
run twice or concurrently: the UNIQUE (lead, step) constraint makes a second queue run insert
nothing, and the reaper is one guarded UPDATE.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from outreach import calendars, db, orgdomains
from outreach.logutil import log, mask
from outreach.store import campaigns as campaigns_store
from outreach.store import emails, mailboxes, reports


def queue_due(url: str, *, campaign_key: str | None = None, now: dt.datetime | None = None,
              workers: int | None = None) -> dict[str, Any]:
    """Insert the due step of every eligible lead, then finish the campaigns that are done.

    The leads are split by id into ``workers`` parts, queued at once, each in its own transaction;
    a failed part is rolled back alone, logged, and its error raised after the others committed (a
    second run queues the rest, nothing twice). A campaign whose enrolments are all done with nothing
    queued, sending or unconfirmed becomes ``finished`` (not one fed by a ``source:``).

    :param campaign_key: only this campaign (default all active campaigns).
    :param now: a fixed clock (UTC); default the database clock (each part's transaction start).
    :param workers: parts, 1 to 16 (default ``OUTREACH_QUEUE_DUE_WORKERS``); only one keeps the ids
        in (lead, step) order: :class:`outreach.settings.QueueSettings`.
    :returns: ``{"queued": n, "per_mailbox": {id: n}, "held": [{"campaign", "step", "missing",
        "leads"}, …], "finished": [key, …]}``; ``held``: leads lacking a field the step ``requires``.
    :raises outreach.settings.SettingValueError: ``workers`` (or the setting) is not 1 to 16.
    :raises psycopg.Error: a part failed (the first failed part's error; the others committed)."""
    from concurrent.futures import ThreadPoolExecutor

    from outreach.settings import QueueSettings

    # Validated like the setting whether it comes from the environment or the caller.
    parts = QueueSettings(**({} if workers is None else {"queue_due_workers": workers})
                          ).queue_due_workers

    def queue_part(part: int) -> list[emails.QueuedCount]:
        with db.transaction(url) as conn:
            emails.email_planner_bulk_joins(conn)
            return emails.email_queue_due(conn, now=now, campaign_key=campaign_key, part=part,
                                          parts=parts)

    # The per-company cap reads lead organisations in the claim; map new domains first.
    orgdomains.fill(url)
    # The calendar reads the leads' public holidays in the queue and the claim; fill them first.
    calendars.fill(url, now=now)
    with ThreadPoolExecutor(parts, thread_name_prefix="outreach-queue-due") as pool:
        futures = [pool.submit(queue_part, part) for part in range(parts)]
    per_mailbox: dict[int, int] = {}
    failures: list[BaseException] = []
    for part, future in enumerate(futures):
        exc = future.exception()
        if exc is not None:
            failures.append(exc)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            log.error("queue-due: part %s/%s (lead id %% %s = %s) failed and was rolled back: "
                      "%s: %s", part + 1, parts, parts, part, type(exc).__name__, first)
            continue
        for r in future.result():
            per_mailbox[r.mailbox_id] = per_mailbox.get(r.mailbox_id, 0) + r.queued
    per_mailbox = dict(sorted(per_mailbox.items()))
    queued = sum(per_mailbox.values())
    if failures:
        log.error("queue-due: %s of %s part(s) failed; the other parts committed queued=%s "
                  "per_mailbox=%s; the next run queues the rest once the error is fixed",
                  len(failures), parts, queued, per_mailbox)
        raise failures[0]
    with db.transaction(url) as conn:
        held = [asdict(h) for h in reports.report_missing_fields(conn, campaign_key=campaign_key)]
    with db.transaction(url) as conn:
        finished = [f.key for f in campaigns_store.campaign_finish(conn, now=now,
                                                                   campaign_key=campaign_key)]
    log.info("queue-due: queued=%s per_mailbox=%s", queued, per_mailbox)
    for h in held:
        log.info("queue-due: %s", held_line(h))
    for key in finished:
        log.info("queue-due: campaign %s finished: every enrolment is done and nothing is in "
                 "flight (a finished campaign takes no new leads)", key)
    return {"queued": queued, "per_mailbox": per_mailbox, "held": held, "finished": finished}


def held_line(held: dict[str, Any]) -> str:
    """Return how a report names leads held back by a step's ``requires``:
    ``q4-ops-intro step 1: 12 lead(s) not queued, missing first_name``."""
    return (f"{held['campaign']} step {held['step']}: {held['leads']} lead(s) not queued, "
            f"missing {held['missing']}")


@dataclass(frozen=True)
class Reaped:
    """What one reaper run did: ``unconfirmed`` ids (handed over to the SMTP server, outcome
    unknown: a person decides) and ``requeued`` ids (never handed over: back in the queue, the
    attempt not counted)."""

    unconfirmed: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)


def reap(url: str, threshold: dt.timedelta, *, release: dt.timedelta | None = None,
         now: dt.datetime | None = None) -> Reaped:
    """Take back rows left 'sending' by a killed or stuck sender: one guarded UPDATE, ``email_reap_stale``.

    A stamped row (``handed_over_at``) fails as unconfirmed once the stamp is older than
    ``threshold``; an unstamped one is requeued, attempt not counted, once neither its claim nor its
    heartbeat is younger than ``release``. The rule: docs/explanation/promise.md.

    :param threshold: ``Settings.reaper_threshold`` (must outlast one handoff).
    :param release: ``Settings.release_threshold``; ``None``: ``threshold``."""
    with db.transaction(url) as conn:
        rows = emails.email_reap_stale(conn, threshold=threshold,
                                       release=release or threshold, now=now)
    result = Reaped([r.id for r in rows if r.unconfirmed],
                    [r.id for r in rows if not r.unconfirmed])
    for r in rows:
        if r.unconfirmed:
            log.error("email %s unconfirmed: left sending since %s by %s, handed over to the SMTP "
                      "server at %s; check Sent Items before doing anything", r.id,
                      r.claimed_at, r.claimed_by, r.handed_over_at)
    if result.requeued:
        log.warning("reaper: %s row(s) left sending by a stopped sender were never handed over: "
                    "back in the queue, attempts not counted: ids %s", len(result.requeued),
                    result.requeued)
    return result


def plan_batches(url: str, batch_size: int, *, parallelism: int = 4,
                 interval: dt.timedelta | None = None, now: dt.datetime | None = None,
                 mailbox_id: int | None = None) -> list[dict[str, Any]]:
    """Plan one send run: at most ``parallelism`` batches, each claiming across mailboxes.

    A mailbox's work is ``min(due, run_left)`` (``mailbox_remaining_today``; paused: none), split by
    :func:`split_work`; each batch claims under every mailbox's lock, so an over-estimate only yields
    smaller batches. Why: docs/explanation/pacing.md.

    :param batch_size: rows one batch claims at most (``OUTREACH_BATCH_SIZE``).
    :param parallelism: batches at most (``OUTREACH_SEND_PARALLELISM``).
    :param interval: the send runs' interval for pacing; ``None`` = no pacing.
    :param mailbox_id: plan for this mailbox only.
    :returns: ``[{"label": str, "limit": rows, "quotas": [[mailbox_id, rows], …]}, …]`` (for XCom)."""
    work = {a.mailbox_id: a.this_run for a in run_allowances(
        url, interval=interval, now=now, mailbox_id=mailbox_id, log_plan=True) if a.this_run > 0}
    return split_work(work, batch_size, parallelism)


@dataclass(frozen=True)
class RunAllowance:
    """What one send run may take from a mailbox with due rows, and why not more.

    ``due``: queued rows due now; ``this_run``: ``min(due, run_left)`` (0 when paused); ``used``
    and ``daily_limit``: today's claims against the cap (0 when frozen); ``due_by_now``: the even
    spread's count by the end of this run (``None`` without pacing); ``hold``: ``"paused"``,
    ``"frozen"``, ``"daily cap"``, ``"send window"``, ``"run share"`` (``run_share``, ``slot_used``),
    ``"pacing"`` or ``None``. ``address`` is masked."""

    mailbox_id: int
    address: str
    status: str
    due: int
    this_run: int
    used: int
    daily_limit: int
    due_by_now: int | None
    run_share: int | None
    slot_used: int
    hold: str | None

    def line(self) -> str:
        """Return the allowance as one line: ``a***@x.example: 97 due, 0 this run: pacing (…)``."""
        head = f"{self.address}: {self.due} due, {self.this_run} this run"
        today = f"{self.used} of today's {self.daily_limit} sent or sending"
        why = {
            None: "",
            "paused": ": mailbox paused (outreach mailbox resume)",
            "frozen": ": mailbox frozen today (the mailbox file's freeze)",
            "daily cap": f": daily cap ({today}, {max(self.daily_limit - self.used, 0)} left; "
                         "the rest waits for tomorrow)",
            "send window": f": outside today's send window ({today})",
            "run share": f": at most {self.run_share} a send run, the steady rate ({today}; "
                         f"{self.slot_used} taken in this run's slot already)",
            "pacing": f": pacing ({today}; an even spread over today's send window has "
                      f"{self.due_by_now} started by the end of this run; "
                      "OUTREACH_SEND_INTERVAL_MINUTES)",
        }[self.hold]
        return head + why


def run_allowances(url: str, *, interval: dt.timedelta | None, now: dt.datetime | None = None,
                   mailbox_id: int | None = None, log_plan: bool = False) -> list[RunAllowance]:
    """Return, per mailbox with due rows, what a run at ``now`` may take and why (:class:`RunAllowance`).

    The figures :func:`plan_batches` plans with, read the same way; nothing is written.

    :param interval: the send runs' interval for pacing; ``None`` = no pacing.
    :param mailbox_id: this mailbox only.
    :param log_plan: log each mailbox's figures as one ``plan:`` line (the send plan does)."""
    out: list[RunAllowance] = []
    with db.connect(url, autocommit=True) as conn:
        for mb in emails.email_plan_mailboxes(conn, now=now, mailbox_id=mailbox_id):
            if mb.status != "active":
                if log_plan:
                    log.info("plan: mailbox %s (%s) is paused; %s due rows wait", mb.mailbox_id,
                             mask(mb.address), mb.due)
                out.append(RunAllowance(mb.mailbox_id, mask(mb.address), mb.status, mb.due, 0,
                                        0, 0, None, None, 0, "paused"))
                continue
            if mb.frozen:  # the claim takes nothing from it today (0137): plan no run for it
                if log_plan:
                    log.info("plan: mailbox %s (%s) is frozen today; %s due rows wait",
                             mb.mailbox_id, mask(mb.address), mb.due)
                out.append(RunAllowance(mb.mailbox_id, mask(mb.address), mb.status, mb.due, 0,
                                        0, 0, None, None, 0, "frozen"))
                continue
            quota = mailboxes.mailbox_remaining_today(
                conn, mailbox_id=mb.mailbox_id, now=now, interval=interval, gap_seconds=None,
                gap_jitter=None, horizon=None)
            n = min(mb.due, quota.run_left)
            hold = None
            if n < mb.due:  # which bound of run_left = min(remaining, share left, due_by_now - used)
                if quota.remaining <= quota.run_left:
                    hold = "daily cap"
                elif not quota.due_by_now:
                    hold = "send window"
                elif (quota.due_by_now or 0) - quota.used <= quota.run_left:
                    hold = "pacing"  # before the run share: it outlasts this run's slot
                else:
                    hold = "run share"
            if log_plan:
                log.info("plan: mailbox %s (%s): due=%s remaining_today=%s run=%s/%s "
                         "run_share=%s due_by_now=%s -> %s this run%s", mb.mailbox_id,
                         mask(mb.address), mb.due, quota.remaining, quota.run_number,
                         quota.window_runs, quota.run_share, quota.due_by_now, n,
                         f" (bound by: {hold})" if hold else "")
            out.append(RunAllowance(mb.mailbox_id, mask(mb.address), mb.status, mb.due, n,
                                    quota.used, quota.daily_limit,
                                    quota.due_by_now if interval else None,
                                    quota.run_share if interval else None, quota.slot_used, hold))
    return out


def split_work(work: dict[int, int], batch_size: int, parallelism: int) -> list[dict[str, Any]]:
    """Split per-mailbox work over at most ``parallelism`` batches of at most ``batch_size`` rows.

    Pure. Each mailbox is spread evenly over ``n = min(parallelism, ceil(total / batch_size))``
    batches (shares and sizes differ by at most one), scaled down by largest remainder when over
    ``n × batch_size``; each batch starts with a different mailbox (fewer waits on one lock).

    :param work: ``{mailbox_id: rows}`` (rows > 0).
    :returns: see :func:`plan_batches`; ``[]`` when there is no work."""
    total = sum(work.values())
    if total <= 0:
        return []
    parts = min(parallelism, math.ceil(total / batch_size))
    capacity = parts * batch_size
    if total > capacity:
        scaled = {m: n * capacity // total for m, n in work.items()}
        rest = capacity - sum(scaled.values())
        for m in sorted(work, key=lambda m: (-(work[m] * capacity % total), m))[:rest]:
            scaled[m] += 1
        work = {m: n for m, n in scaled.items() if n > 0}
    quotas: list[dict[int, int]] = [{} for _ in range(parts)]
    offset = 0
    for m in sorted(work):
        base, extra = divmod(work[m], parts)
        for i in range(parts):
            k = base + (1 if (i - offset) % parts < extra else 0)
            if k:
                quotas[i][m] = k
        offset = (offset + extra) % parts
    out: list[dict[str, Any]] = []
    for i, q in enumerate(quotas):
        ids = sorted(q)
        order = ids[i % len(ids):] + ids[:i % len(ids)] if ids else []
        shown = ", ".join(str(m) for m in order[:6]) + (", …" if len(order) > 6 else "")
        out.append({"label": f"batch {i + 1}/{parts}: {sum(q.values())} from mailbox(es) {shown}",
                    "limit": sum(q.values()), "quotas": [[m, q[m]] for m in order]})
    return [b for b in out if b["limit"] > 0]
