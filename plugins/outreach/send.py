"""Sending: claim a batch, re-check suppression and enrolment, render, hand off, record, row by row.

Each row's outcome is committed right after its own handoff, and every change of a claimed row is
one guarded UPDATE (status 'sending' and our claim token); what a second run does:
docs/explanation/promise.md#what-happens-when-a-step-runs-twice. The steps of one row live in
:mod:`outreach.claim`, :mod:`outreach.compose`, :mod:`outreach.handoff` and :mod:`outreach.record`."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from outreach import db
from outreach.claim import ClaimHeartbeat, Clock, _first_line, claim, worker_name
from outreach.compose import DkimKeyLoader, _KeyCache
from outreach.handoff import SmtpConnector, _release_unreachable, _send_one, _SessionFailed
from outreach.logutil import log, mailbox_name
from outreach.queue import Reaped, plan_batches, reap
from outreach.record import BatchSummary, _Progress, _recover
from outreach.settings import Settings
from outreach.store import mailboxes
from outreach.transport import SmtpSession


class MailboxUnreachable(RuntimeError):
    """A mailbox could not send at all this run, before any of its claimed rows reached the SMTP server.

    Stages: ``CONNECT`` (connection or login failed, a missing Airflow connection), ``MAIL`` (a 530
    5.7.0: :func:`outreach.transport.session_refusal`) or ``SIGN`` (the DKIM key failed to load;
    nothing goes out unsigned). Its rows went back to the queue, no attempt counted. Raised after
    every other mailbox of the batch was processed; clearing the task is safe. The message has one
    line per failed mailbox.

    :ivar failures: one dict per failed mailbox: ``mailbox_id``, ``mailbox`` (masked), ``conn_id``,
        ``stage``, ``reply``, ``released`` (row count) and ``line``.
    :ivar summaries: the :class:`BatchSummary` of every mailbox processed."""

    def __init__(self, failures: list[dict[str, Any]], summaries: list[BatchSummary]) -> None:
        self.failures = failures
        self.summaries = summaries
        super().__init__("; ".join(f["line"] for f in failures))


def raise_if_unreachable(summaries: Sequence[BatchSummary]) -> None:
    """Raise :class:`MailboxUnreachable` when a mailbox of ``summaries`` could not send at all.

    :raises MailboxUnreachable: see there.
    """
    failures = [{"mailbox_id": b.mailbox_id, "mailbox": b.mailbox, "released": b.released,
                 **b.unreachable} for b in summaries if b.unreachable]
    if failures:
        raise MailboxUnreachable(failures, list(summaries))


class BatchAborted(RuntimeError):
    """The database connection was lost during a send; the task must fail.

    What could be recorded after reconnecting was; rows not yet handed off were released. The
    message is one line naming the stage and the ids.

    :ivar stage: ``CLAIM`` (the claim or its read-back) or ``SEND`` (during the rows).
    :ivar released: ids put back in the queue (never handed off, attempt not counted).
    :ivar stuck: ids left 'sending' (no reconnect), for the reaper."""

    def __init__(self, message: str, *, stage: str = "SEND", released: Sequence[int] = (),
                 stuck: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.stage, self.released, self.stuck = stage, list(released), list(stuck)


class SendStopped(RuntimeError):
    """A session of :func:`send_sessions` stopped before its next row because its ``stop`` event
    was set; the rows it had not handed over were released (back in the queue, no attempt)."""


def send_sessions(url: str, lanes: Sequence[dict[str, Any]], connector: SmtpConnector,
                  settings: Settings, *, worker: str | None = None,
                  dkim_keys: DkimKeyLoader | None = None,
                  clock_for: Callable[[threading.Event], Clock] | None = None,
                  stop: threading.Event | None = None, at_once: int | None = None,
                  ) -> list[PlannedSummary]:
    """Send several planned batches at once, each over its own SMTP sessions in its own thread
    (:func:`send_planned`): one send task carrying as many sessions as it holds pool slots
    (``OUTREACH_SEND_SESSIONS_PER_TASK``, docs/reference/sizing.md), so a run pays one task
    start-up per task, not per session.

    Every session claims, checks and records its own rows exactly as alone: each claim is its
    own ``claim_emails_v4`` call with the shared ``worker`` as ``claimed_by``, and each row's
    outcome its own guarded UPDATE, so the threads share nothing in the database but the rows'
    locks. When one session raises (the database went away, a bug), ``stop`` is set (Airflow
    stopping the task: :func:`outreach.airflow.tasks_send.send_task`) or this thread is
    interrupted, the others stop before their next row, releasing what they had not handed
    over; a mailbox that cannot send at all does not stop the others. Further interrupts while
    they end (a second Ctrl-C) are logged, not raised: a session cannot be cut off mid-reply.

    :param lanes: the planned batches, ``{"label", "quotas": [(mailbox_id, n), …]}`` each.
    :param clock_for: the :class:`Clock` of a session from the shared stop event (default: the
        real clock, whose waits end as soon as the event is set).
    :param stop: the event that stops every session (default: one of its own).
    :param at_once: sessions at most at the same time (default: every lane); the rest wait.
    :returns: one :class:`PlannedSummary` per lane, in ``lanes`` order.
    :raises MailboxUnreachable: after every session ended, when a mailbox of any could not send
        (all of them in one exception).
    :raises SendStopped: ``stop`` was set from outside and a session stopped early.
    :raises BaseException: the first other error of a session (or the interruption), after every
        session ended; what the others did is logged. Several sessions that lost the database
        give one :class:`BatchAborted` naming every one's rows (:func:`merged_aborts`).
    """
    from concurrent.futures import ThreadPoolExecutor, wait

    worker = worker or worker_name()
    stop = stop or threading.Event()

    def stoppable(event: threading.Event) -> Clock:
        def sleep(seconds: float) -> None:
            event.wait(seconds)  # a gap's wait ends as soon as the task stops

        return Clock(sleep=sleep)

    make_clock = clock_for or stoppable
    lanes = list(lanes)
    results: list[PlannedSummary | None] = [None] * len(lanes)
    errors: list[BaseException] = []
    stopped: list[SendStopped] = []
    failures: list[dict[str, Any]] = []

    def lane(i: int) -> None:
        b = lanes[i]
        try:
            if stop.is_set():
                raise SendStopped(f"{b['label']}: stopped before it started")
            results[i] = send_planned(url, b["quotas"], connector, settings, label=b["label"],
                                      worker=worker, dkim_keys=dkim_keys,
                                      clock=make_clock(stop), stop=stop)
        except MailboxUnreachable as exc:
            results[i] = PlannedSummary(label=b["label"], batches=list(exc.summaries))
            failures.extend(exc.failures)
        except SendStopped as exc:
            stopped.append(exc)
        except BaseException as exc:  # noqa: BLE001 - raised again below, after every session
            errors.append(exc)
            stop.set()

    width = max(1, min(at_once or len(lanes), len(lanes)))
    pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="smtp-session")
    futures: list[Any] = []
    try:
        for i in range(len(lanes)):
            futures.append(pool.submit(lane, i))
        wait(futures)
    except BaseException as exc:  # noqa: BLE001 - this thread interrupted: the task is being stopped
        stop.set()
        errors.insert(0, exc)
    finally:
        # Every session ends (stopped ones before their next row). Waited on through the futures,
        # not Thread.join: an interrupted join marks a running thread stopped (Python 3.11).
        while True:
            try:
                wait(futures)
                break
            except (KeyboardInterrupt, SystemExit):  # a second Ctrl-C must not orphan their rows
                stop.set()
                with contextlib.suppress(KeyboardInterrupt, SystemExit):
                    log.warning("still stopping: each SMTP session ends its current row (a reply "
                                "waits up to OUTREACH_SMTP_TIMEOUT seconds), then gives its other "
                                "rows back; SIGKILL would leave them to the reaper")
        pool.shutdown(wait=True)  # idle threads only now
    done = [r for r in results if r is not None]
    log.info("%s session(s), %s at once: %s%s", len(lanes), width,
             " | ".join(r.line() for r in done) or "nothing sent",
             f"; {len(stopped)} stopped early" if stopped else "")
    if errors:
        raise merged_aborts(errors, len(lanes))
    if stopped:
        raise SendStopped(f"the task was stopped: {len(stopped)} of {len(lanes)} session(s) "
                          "stopped before their next row, their rows back in the queue")
    if failures:
        raise MailboxUnreachable(failures, [s for r in done for s in r.batches])
    return done


def merged_aborts(errors: Sequence[BaseException], sessions: int) -> BaseException:
    """The error :func:`send_sessions` raises for its sessions' ``errors`` (first first): the first,
    unless it is a :class:`BatchAborted` and others are too (the database went away under several
    sessions): then one :class:`BatchAborted` whose line has every one of them and whose
    ``released`` and ``stuck`` ids are all of theirs, so the task's one line names every row."""
    aborted = [e for e in errors if isinstance(e, BatchAborted)]
    if not isinstance(errors[0], BatchAborted) or len(aborted) < 2:
        return errors[0]
    merged = BatchAborted(f"{len(aborted)} of {sessions} SMTP sessions lost the database: "
                          + " | ".join(str(e) for e in aborted), stage=aborted[0].stage,
                          released=[i for e in aborted for i in e.released],
                          stuck=[i for e in aborted for i in e.stuck])
    merged.__cause__ = aborted[0]
    return merged


def send_batch(url: str, mailbox_id: int, limit: int, connector: SmtpConnector,
               settings: Settings, *, worker: str | None = None, now: dt.datetime | None = None,
               dkim_keys: DkimKeyLoader | None = None,
               message_class: str = "marketing", clock: Clock | None = None,
               stop: threading.Event | None = None) -> BatchSummary:
    """Claim one batch of a mailbox and send it over one SMTP session, committing each row's outcome.

    :param limit: rows at most (further cut by the daily quota and the run's share: :func:`claim`).
    :param connector: opens the mailbox's SMTP connection by Airflow connection id.
    :param worker: recorded as ``claimed_by`` (default ``cli@host:pid``).
    :param dkim_keys: loads a mailbox's DKIM private key by connection id, once per batch.
    :param message_class: ``marketing`` or ``transactional`` (see :func:`claim`).
    :param clock: waits for each row's reserved handoff moment (default the real clock).
    :param stop: once set, no further row is handed over: :class:`SendStopped` is raised after
        the rows not handed over were released (another session of the task failed, or the task
        is being stopped: :func:`send_sessions`).
    :raises BatchAborted: the database went away mid-batch (unrecorded rows stay for the reaper).
    :raises SendStopped: ``stop`` was set.
    :raises outreach.db.OutreachDBError: the database is unreachable before the claim.
    :returns: the summary; ``summary.unreachable`` is set (rows released) when the mailbox could not
        connect, log in or load its DKIM key: callers raise :class:`MailboxUnreachable` later."""
    worker = worker or worker_name()
    conn = db.connect(url, autocommit=True)
    try:
        try:
            rows, note = claim(conn, mailbox_id, limit, worker=worker, now=now,
                               interval=settings.send_interval, message_class=message_class,
                               gap_seconds=settings.send_gap_seconds,
                               gap_jitter=settings.send_gap_jitter,
                               gap_horizon=settings.gap_horizon,
                               person_per_day=settings.contact_per_day or None,
                               person_per_week=settings.contact_per_week or None,
                               company_per_day=settings.contact_company_per_day or None,
                               provider_hourly=settings.provider_hourly or None)
        except psycopg.OperationalError as exc:
            # The claim either committed or not; nothing was handed over either way, so rows it
            # may have claimed are put back in the queue by the reaper (never stamped).
            raise BatchAborted(
                f"database connection lost at stage CLAIM (mailbox {mailbox_id}): nothing was "
                f"handed over; rows the claim may have taken go back to the queue with the "
                f"reaper; ({_first_line(exc)})", stage="CLAIM") from exc
        clock = clock or Clock()
        longest_wait = settings.gap_horizon + dt.timedelta(
            seconds=settings.send_gap_seconds * (1 + settings.send_gap_jitter))
        summary = BatchSummary(mailbox_id=mailbox_id, mailbox="", claimed=len(rows), note=note,
                               held=getattr(note, "held", 0), message_class=message_class)
        progress = _Progress()
        heartbeat = ClaimHeartbeat(url, rows, settings.heartbeat_interval, now).start()
        # From here on, whatever stops the batch goes through _recover: nothing claimed is left
        # 'sending' for the reaper unless the database itself is gone.
        try:
            mailbox = mailboxes.mailbox_by_id(conn, mailbox_id=mailbox_id)
            summary.mailbox = (mailbox_name(mailbox.label, mailbox.display_name,
                                            mailbox.address) if mailbox else "")
            if rows:
                session = SmtpSession(lambda: connector(rows[0]["smtp_conn_id"]), settings.smtp_timeout)
                keys = _KeyCache(dkim_keys)
                try:
                    for row in rows:
                        # The gap: wait for this row's reserved moment, then the pre-send
                        # checks (suppression, our claim) run right before its handoff.
                        clock.wait_until(row.get("not_before"), longest_wait)
                        if stop is not None and stop.is_set():
                            raise SendStopped(f"mailbox {mailbox_id}: stopped after {progress.done} "
                                              f"of {len(rows)} row(s)")
                        _send_one(conn, session, row, settings, summary, now, keys, progress)
                        progress.done += 1
                except _SessionFailed as exc:
                    _release_unreachable(conn, rows[progress.done:], exc, summary)
                finally:
                    session.close()
        except psycopg.OperationalError as exc:
            log.error("database connection lost during batch of mailbox %s after %s of %s "
                      "rows: %s", mailbox_id, progress.done, len(rows), exc)
            outcome = _recover(url, rows[progress.done:], progress, settings, summary, now)
            log.error(summary.line())
            raise BatchAborted(
                f"database connection lost mid-batch at stage SEND (mailbox {mailbox_id}, after "
                f"{progress.done} of {len(rows)} row(s)): {outcome.text()}; "
                f"({_first_line(exc)})", stage="SEND", released=outcome.released,
                stuck=outcome.stuck) from exc
        except BaseException:
            # A bug, or the task being terminated: record the handed-off row and release
            # the rest right away instead of leaving them all to the reaper.
            _recover(url, rows[progress.done:], progress, settings, summary, now, wait=False)
            log.error(summary.line())
            raise
        finally:
            heartbeat.stop()
        (log.error if summary.unreachable else log.info)(summary.line())
        return summary
    finally:
        conn.close()


@dataclass
class PlannedSummary:
    """What one planned batch did across its mailboxes: one :class:`BatchSummary` per mailbox,
    and the totals (``claimed``, ``sent``, … as properties), for the task log and XCom."""

    label: str
    batches: list[BatchSummary] = field(default_factory=list)

    def _total(self, key: str) -> int:
        return sum(getattr(b, key) for b in self.batches)

    claimed = property(lambda self: self._total("claimed"))
    sent = property(lambda self: self._total("sent"))
    retried = property(lambda self: self._total("retried"))
    failed = property(lambda self: self._total("failed"))
    unconfirmed = property(lambda self: self._total("unconfirmed"))
    suppressed = property(lambda self: self._total("suppressed"))
    held = property(lambda self: self._total("held"))

    def line(self) -> str:
        """Return the analyst-facing summary line of the whole planned batch (``held=`` only
        when its claims held rows back for later)."""
        return (f"{self.label or 'batch'}: mailboxes={len(self.batches)} claimed={self.claimed} "
                f"sent={self.sent} retried={self.retried} failed={self.failed} "
                f"unconfirmed={self.unconfirmed} suppressed={self.suppressed}"
                + (f" held={self.held}" if self.held else ""))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict: the totals, ``label`` and ``batches``."""
        keys = ("claimed", "sent", "retried", "failed", "unconfirmed", "suppressed", "held")
        return {"label": self.label, **{k: getattr(self, k) for k in keys},
                "batches": [b.to_dict() for b in self.batches]}


def send_planned(url: str, quotas: Sequence[Sequence[int]], connector: SmtpConnector,
                 settings: Settings, *, label: str = "", worker: str | None = None,
                 now: dt.datetime | None = None, dkim_keys: DkimKeyLoader | None = None,
                 clock: Clock | None = None, limit: int | None = None,
                 stop: threading.Event | None = None) -> PlannedSummary:
    """Send one planned batch: for each ``(mailbox_id, n)`` of ``quotas``, :func:`send_batch` up to n.

    Mailboxes are claimed one after the other, each under its own lock and quota.

    :param quotas: ``[(mailbox_id, rows at most), …]`` in claim order (JSON lists are fine).
    :param label: the batch's name in logs.
    :param limit: rows claimed at most, all mailboxes together (``None``: only the quotas).
    :param stop: see :func:`send_batch`; once set, no further mailbox is claimed.
    :raises outreach.db.OutreachDBError: see :func:`send_batch`; later mailboxes stay queued.
    :raises SendStopped: ``stop`` was set.
    :raises MailboxUnreachable: after every mailbox was processed, if one could not send at all."""
    worker = worker or worker_name()
    summary = PlannedSummary(label=label)
    for mailbox_id, n in quotas:
        left = None if limit is None else limit - summary.claimed
        if left is not None and left <= 0:
            break
        if stop is not None and stop.is_set():
            raise SendStopped(f"{label or 'batch'}: stopped before mailbox {mailbox_id}")
        summary.batches.append(send_batch(url, int(mailbox_id),
                                          int(n) if left is None else min(int(n), left),
                                          connector, settings, worker=worker, now=now,
                                          dkim_keys=dkim_keys, clock=clock, stop=stop))
    log.info(summary.line())
    raise_if_unreachable(summary.batches)
    return summary


@dataclass
class SendRun:
    """What one send run (:func:`send_run`) did: the rows it reaped, the plan, and one
    :class:`PlannedSummary` per planned batch (in plan order)."""

    reaped: Reaped
    plan: list[dict[str, Any]]
    batches: list[PlannedSummary] = field(default_factory=list)

    @property
    def claimed(self) -> int:
        """Rows claimed by the whole run (0: nothing was due or allowed)."""
        return sum(b.claimed for b in self.batches)


def send_run(url: str, connector: SmtpConnector, settings: Settings, *,
             mailbox_id: int | None = None, worker: str | None = None,
             now: dt.datetime | None = None, dkim_keys: DkimKeyLoader | None = None,
             clock: Clock | None = None, limit: int | None = None,
             sessions: int | None = None) -> SendRun:
    """One send run, in the send DAG's order: reap, plan (:func:`outreach.queue.plan_batches`), send.

    The DAG runs the same pieces as tasks (:mod:`outreach.airflow.tasks_send`); ``outreach send``
    and the tests run them here in one process: ``sessions`` planned batches at once
    (:func:`send_sessions`), as one send task does, unless ``limit``, ``now`` or ``clock`` is given
    (then one batch after the other, so ``limit`` counts exactly).

    :param mailbox_id: plan for this mailbox only.
    :param worker: the ``claimed_by`` of every claim (default :func:`worker_name`).
    :param limit: rows the whole run claims at most (``outreach send --limit``; ``None``: the plan's).
    :param sessions: planned batches at once (default ``settings.send_sessions_per_task``; ``outreach
        send`` passes what a send task of the DAG takes:
        :func:`outreach.airflow.defaults.send_sessions_per_task`).
    :raises BatchAborted: the database connection was lost while planning (nothing claimed).
    :raises outreach.db.OutreachDBError: see :func:`send_batch`.
    :raises MailboxUnreachable: after every planned batch was sent, if a mailbox could not send."""
    reaped = reap(url, settings.reaper_threshold, release=settings.release_threshold, now=now)
    try:
        plan = plan_batches(url, settings.batch_size, parallelism=settings.send_parallelism,
                            interval=settings.send_interval, now=now, mailbox_id=mailbox_id)
    except psycopg.OperationalError as exc:  # nothing claimed yet
        raise BatchAborted(f"database connection lost at stage PLAN: nothing was claimed "
                           f"or released; ({str(exc).strip().splitlines()[0]})",
                           stage="PLAN") from exc
    run = SendRun(reaped, plan)
    at_once = sessions or settings.send_sessions_per_task
    if at_once > 1 and len(plan) > 1 and limit is None and now is None and clock is None:
        run.batches.extend(send_sessions(url, plan, connector, settings, worker=worker,
                                         dkim_keys=dkim_keys, at_once=at_once))
        return run
    failures: list[dict[str, Any]] = []
    for b in plan:
        left = None if limit is None else limit - run.claimed
        if left is not None and left <= 0:
            break
        try:
            run.batches.append(send_planned(url, b["quotas"], connector, settings, label=b["label"],
                                            worker=worker, now=now, dkim_keys=dkim_keys,
                                            clock=clock, limit=left))
        except MailboxUnreachable as exc:  # the other planned batches still go out
            run.batches.append(PlannedSummary(label=b["label"], batches=list(exc.summaries)))
            failures += exc.failures
    if failures:
        raise MailboxUnreachable(failures, [s for b in run.batches for s in b.batches])
    return run
