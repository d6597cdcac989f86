"""Task bodies of the send pipeline: ``outreach_queue_due`` (queue the due steps, cache MX
providers) and ``outreach_send`` (preflight and plan, one mapped send per planned batch or group
of batches sent at once, summary, after_send; see :mod:`outreach.airflow.tasks_common` for what a
task body may do).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from outreach.airflow.alerts import (
    alert_preflight,
    mailbox_names,
    refused_logins,
)
from outreach.airflow.connections import (
    database_url,
    dkim_private_key,
    settings,
    smtp_connector,
)
from outreach.airflow.defaults import send_sessions_per_task
from outreach.airflow.tasks_common import config_check_task
from outreach.logutil import log, mask


def queue_task() -> dict[str, Any]:
    """Reap stale 'sending' rows, then queue every due sequence step."""
    from outreach.queue import queue_due, reap

    url = database_url()
    queue_settings = settings(unsubscribe=False)  # no unsubscribe secret needed
    reaped = reap(url, queue_settings.reaper_threshold, release=queue_settings.release_threshold)
    result = queue_due(url)
    result["reaped"] = len(reaped.unconfirmed)
    result["reaped_requeued"] = len(reaped.requeued)
    return result


def mx_providers_task() -> dict[str, int]:
    """Cache the mailbox provider (MX records) of the domains of queued rows, for the provider
    cap (:func:`outreach.mxproviders.refresh`; resolver: ``OUTREACH_DNS_NAMESERVER``)."""
    from outreach.mxproviders import refresh
    from outreach.settings import PreflightSettings

    return refresh(database_url(), nameserver=PreflightSettings().dns_nameserver)


def preflight_mode() -> str:
    """Return ``OUTREACH_PREFLIGHT``: ``block``, ``warn`` (the default) or ``off``.

    :raises outreach.settings.SettingsError: another value (or a bad preflight setting).
    """
    from outreach.settings import PreflightSettings

    return PreflightSettings().preflight


def _expected_dkim(target: dict[str, Any]) -> str | None:
    """The base64 public key of a mailbox's configured DKIM private key (``dkim_key_conn_id``)
    for the preflight to compare with DNS; ``None`` without one or when it is unusable (logged)."""
    from outreach.signing import SigningError, public_key_b64

    if not target["dkim_key_conn_id"]:
        return None
    try:
        return public_key_b64(dkim_private_key(target["dkim_key_conn_id"]))
    except (LookupError, SigningError) as exc:
        log.error("preflight: DKIM key of %s unusable: %s", target["domain"], exc)
        return None


def preflight_task() -> dict[str, Any]:
    """Run the DNS preflight for every active mailbox's domain and ask every relay what it can carry.

    ``OUTREACH_PREFLIGHT``: ``off`` skips it, ``warn`` only logs, ``block`` returns failing domains'
    mailboxes in ``blocked`` for the plan to skip; every FAIL alerts once per domain, checks and UTC
    day (:func:`alert_preflight`). Relays (:func:`outreach.preflight.check_relays`) block nothing.

    :returns: ``{"mode", "blocked": [{"mailbox_id", "domain", "reason"}], "domains": {domain:
        "PASS"|"WARN"|"FAIL"}, "failed": {domain: [check, …]}, "relays": {mailbox id:
        {"status", "cannot_carry"}}}``."""
    from dataclasses import asdict

    from outreach import db
    from outreach.preflight import make_resolver, run_preflight
    from outreach.store import mailboxes as mailboxes_store

    config_check_task(marketing=True)
    mode = preflight_mode()
    out: dict[str, Any] = {"mode": mode, "blocked": [], "domains": {}, "failed": {}}
    if mode == "off":
        log.info("preflight: off (OUTREACH_PREFLIGHT=off)")
        return out
    from outreach.settings import PreflightSettings

    checks = PreflightSettings()
    resolver = make_resolver(checks.dns_nameserver)
    sending_ip = checks.sending_ip
    with db.connect(database_url(), autocommit=True) as conn:
        targets = [asdict(t) for t in mailboxes_store.mailbox_preflight_targets(conn)]
    reports: dict[tuple[str, str | None, str | None], Any] = {}
    for t in targets:
        key = (t["domain"], t["dkim_selector"], t["dkim_key_conn_id"])
        if key not in reports:
            reports[key] = run_preflight(t["domain"], selector=t["dkim_selector"],
                                         sending_ip=sending_ip,
                                         dkim_public_key=_expected_dkim(t), resolver=resolver)
            report = reports[key]
            for line in report.text().splitlines():
                level = log.info if not report.failed else (log.error if mode == "block" else log.warning)
                level("preflight: %s", line)
        report = reports[key]
        verdict = "FAIL" if report.failed else ("WARN" if any(c.status == "WARN" for c in report.checks)
                                                else "PASS")
        out["domains"][t["domain"]] = max(out["domains"].get(t["domain"], "PASS"), verdict,
                                          key=("PASS", "WARN", "FAIL").index)
        if report.failed:
            failed = ", ".join(c.name for c in report.checks if c.status == "FAIL")
            out["failed"][t["domain"]] = [c.name for c in report.checks if c.status == "FAIL"]
            if mode == "block":
                out["blocked"].append({"mailbox_id": t["id"], "domain": t["domain"],
                                       "reason": f"preflight FAIL: {failed}"})
                log.error("preflight: mailbox %s (%s) blocked for this run: %s failed "
                          "(OUTREACH_PREFLIGHT=block)", t["id"], mask(t["address"]), failed)
            else:
                log.warning("preflight: mailbox %s (%s) sends anyway: %s failed "
                            "(OUTREACH_PREFLIGHT=warn)", t["id"], mask(t["address"]), failed)
    # The relays, before the first send: what each can carry (outreach.preflight.check_relays).
    from outreach.preflight import check_relays

    out["relays"] = {}
    for relay in check_relays(database_url(), smtp_connector):
        (log.warning if relay.check.status != "PASS" else log.info)("preflight: %s",
                                                                     relay.check.line())
        out["relays"][str(relay.mailbox_id)] = {"status": relay.check.status,
                                                "cannot_carry": relay.cannot_carry}
    if out["failed"]:
        alert_preflight(out)
    return out


def preflight_and_plan_task() -> list[dict[str, Any]]:
    """Run the preflight (:func:`preflight_task`: its lines are logged first), then plan this
    run's batches with its result (:func:`plan_task`): the send DAG's ``plan``, one task
    instead of two (each task instance costs a process start and a DAG parse)."""
    return plan_task(preflight_task())


def plan_task(checked: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Reap stale rows, then plan this run's batches (one mapped send task each, or per
    ``OUTREACH_SEND_SESSIONS_PER_TASK`` of them: :func:`pack_sessions`).

    A mailbox the preflight blocked gets a batch of its own that fails (:func:`send_task`), so it
    never shows green; nothing due leaves ``send_batch`` skipped, with the reason logged."""
    from outreach.queue import plan_batches, reap

    run_settings = settings()
    url = database_url()
    reap(url, run_settings.reaper_threshold, release=run_settings.release_threshold)
    names = mailbox_names(url)
    blocked = {b["mailbox_id"]: b for b in (checked or {}).get("blocked", [])}
    batches, held = [], {}
    for b in plan_batches(url, run_settings.batch_size, parallelism=run_settings.send_parallelism,
                          interval=run_settings.send_interval):
        for mailbox_id, n in b["quotas"]:
            if mailbox_id in blocked:
                held[mailbox_id] = held.get(mailbox_id, 0) + n
        b["quotas"] = [q for q in b["quotas"] if q[0] not in blocked]
        if b["quotas"]:
            batches.append(b)
    for i, b in enumerate(batches):
        b["label"] = f"batch {i + 1}/{len(batches)}: " + ", ".join(
            f"{names.get(m, m)} {n}" for m, n in b["quotas"])
    # The DAG's pool_slots of send_batch: the same number (its range checked by run_settings).
    batches = pack_sessions(batches, send_sessions_per_task(), names)
    for mailbox_id, n in sorted(held.items()):
        why = blocked[mailbox_id]
        log.error("plan: %s left out of this run (%s rows due): %s (domain %s; "
                  "OUTREACH_PREFLIGHT=block)", names.get(mailbox_id, mailbox_id), n, why["reason"],
                  why["domain"])
        batches.append({"label": f"{names.get(mailbox_id, mailbox_id)}: blocked, {why['reason']}",
                        "limit": 0, "quotas": [],
                        "blocked": {**why, "due": n, "mailbox": names.get(mailbox_id, mailbox_id)}})
    for mailbox_id in sorted(set(blocked) - set(held)):
        log.warning("plan: %s blocked by the preflight (%s) but had nothing due",
                    names.get(mailbox_id, mailbox_id), blocked[mailbox_id]["reason"])
    if not batches:
        log.info("plan: nothing to send this run (nothing due within today's limits, or every "
                 "mailbox paused); send_batch is skipped")
    planned = sum(len(b.get("sessions") or [b]) for b in batches)
    log.info("plan: %s batch(es) in %s send task(s): %s", planned, len(batches),
             [b["label"] for b in batches])
    return batches


def pack_sessions(batches: list[dict[str, Any]], per_task: int,
                  labels: dict[Any, str] | None = None) -> list[dict[str, Any]]:
    """Put every ``per_task`` consecutive planned batches into one send task (``OUTREACH_SEND_SESSIONS_PER_TASK``):
    ``{"label", "limit", "quotas": [], "sessions": [batch, …]}``, whose batches run at once, one
    SMTP session each (:func:`outreach.send.send_sessions`). ``per_task`` 1 leaves the batches as
    they are (one task, one session each).

    :param batches: the plan's batches, each with its ``label``.
    :param labels: mailbox id → name for the task's label (rows per mailbox over its batches).
    :returns: the send tasks' inputs, in plan order."""
    labels = labels or {}
    if per_task <= 1 or len(batches) <= 1:
        return batches
    tasks = []
    for first in range(0, len(batches), per_task):
        group = batches[first:first + per_task]
        rows: dict[Any, int] = {}  # per mailbox over the group, in first-seen order
        for b in group:
            for mailbox_id, n in b["quotas"]:
                rows[mailbox_id] = rows.get(mailbox_id, 0) + int(n)
        names = ", ".join(f"{labels.get(m, m)} {n}" for m, n in rows.items())
        span = (f"batch {first + 1}" if len(group) == 1
                else f"batches {first + 1}–{first + len(group)}")
        tasks.append({"label": f"{span}/{len(batches)} at once: {names}",
                      "limit": sum(b["limit"] for b in group), "quotas": [], "sessions": group})
    return tasks


def worker_for(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
    """Return the ``claimed_by`` of a send task try: ``<dag id>/<run id>/<task id>[<map index>]#try<n>``.
    Everything a run claimed starts with :func:`run_prefix` (``sql/queries/emails.sql: email_run_outcomes``)."""
    return f"{run_prefix(dag_id, run_id)}{task_id}[{map_index}]#try{try_number}"


def run_prefix(dag_id: str, run_id: str) -> str:
    """Return the ``claimed_by`` prefix of every row a DAG run's send tasks claimed."""
    return f"{dag_id}/{run_id}/"


def run_outcomes(url: str, worker_prefix: str) -> list[dict[str, Any]]:
    """Return, per mailbox, what the rows claimed by a run (or one task try) are now: the
    ledger, not the plan (``email_run_outcomes``)."""
    from dataclasses import asdict

    from outreach import db
    from outreach.store import emails as emails_store

    with db.connect(url, autocommit=True) as conn:
        return [asdict(r) for r in emails_store.email_run_outcomes(conn, worker_prefix=worker_prefix)]


def _outcome_label(outcomes: list[dict[str, Any]]) -> str:
    from outreach.logutil import mailbox_name

    parts = []
    for o in outcomes:
        counts = [f"{k} {o[k]}" for k in ("sent", "unconfirmed", "failed", "requeued", "sending",
                                          "suppressed") if o[k]]
        parts.append(f"{mailbox_name(o['label'], o['display_name'], o['address'])}: "
                     + (", ".join(counts) or "nothing"))
    return "; ".join(parts)


@contextlib.contextmanager
def _stop_on_sigterm(stop: threading.Event) -> Iterator[None]:
    """While the block runs, SIGTERM also sets ``stop``, then calls the handler it replaced.

    Airflow stops a task with SIGTERM, then SIGKILL 5 s later (the supervisor); its task
    runner's handler only calls the operator's ``on_kill`` and raises nothing, so the SMTP
    sessions of :func:`outreach.send.send_sessions` would go on until the SIGKILL. With ``stop``
    set they stop before their next row and give their rows back at once. Outside the main
    thread (no signal handler can be set there) the block runs unchanged."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        stop.set()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def send_task(batch: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Claim and send one planned batch across its mailboxes; return its summary.

    The task's label says what was planned, then what was done per mailbox; the log has one line per
    email handed over (:func:`outreach.claim.describe`). Clearing the task is safe.

    :raises outreach.send.MailboxUnreachable: a mailbox could not send at all (rows requeued,
        attempts uncounted; the others were sent), retried.
    :raises outreach.send.SendStopped: Airflow stopped the task (SIGTERM) while its session(s)
        ran: they stopped before their next row, their rows back in the queue.
    :raises airflow.sdk.exceptions.AirflowFailException: a mailbox the preflight blocked, or rows
        left unconfirmed (a person decides); no retry."""
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.send import MailboxUnreachable, PlannedSummary, send_sessions

    context["batch_label"] = batch["label"]
    if batch.get("blocked"):
        b = batch["blocked"]
        raise AirflowFailException(
            f"{b['mailbox']}: {b['due']} due email(s) not sent, {b['reason']} for {b['domain']} "
            f"(OUTREACH_PREFLIGHT=block): fix the DNS records (outreach preflight {b['domain']}) "
            "and clear this task, or set OUTREACH_PREFLIGHT=warn")
    ti = context["ti"]
    worker = worker_for(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number)
    url = database_url()
    try:
        # The batch's sessions at once (one, unless the plan packed several), one thread each;
        # the task holds as many pool slots (never more sessions at once than its pool_slots,
        # whatever the plan packed). A SIGTERM stops each before its next row, in a gap's wait too.
        stop = threading.Event()
        with _stop_on_sigterm(stop):
            lanes = send_sessions(url, batch.get("sessions") or [batch], smtp_connector,
                                  settings(), worker=worker, dkim_keys=dkim_private_key, stop=stop,
                                  at_once=getattr(getattr(ti, "task", None), "pool_slots", None))
        summary = PlannedSummary(label=batch["label"],
                                 batches=[s for lane in lanes for s in lane.batches])
    except MailboxUnreachable as exc:
        refused_logins([f["conn_id"] for f in exc.failures], exc)
        raise
    finally:
        outcomes = run_outcomes(url, worker)
        # The label sums every try of this task (a retry or a Clear is the same task: what the
        # first try sent stays in it); the unconfirmed check below is this try's alone.
        every_try = run_outcomes(url, worker[:worker.rindex("#try") + len("#try")])
        if every_try:
            context["batch_label"] = _outcome_label(every_try)
    ids = [i for o in outcomes for i in o["unconfirmed_ids"]]
    if ids:
        raise AirflowFailException(
            f"{len(ids)} email(s) unconfirmed (ids {ids}): the end of DATA got no reply, so they "
            "may have gone out. Check the mailbox's Sent Items, then answer the Required Action "
            "(outreach_unconfirmed_review) or run outreach resolve; never resent automatically")
    return summary.to_dict()


def summary_task(batches: list[dict[str, Any]] | None, results: list[dict[str, Any]] | None,
                 dag_id: str, run_id: str) -> dict[str, Any]:
    """Report what the run actually did, read from the ledger by run (every row its send tasks
    claimed, in any try, cleared tries included), and log one line per mailbox and one total.

    :returns: ``{"batches", "tasks_ok", "totals": {claimed, sent, …}, "held", "mailboxes": […]}``
        (``held``: rows the send tasks' claims held back for later, from their results).
    :param batches: the plan's batches; ``None`` when the plan failed (no result).
    :raises airflow.sdk.exceptions.AirflowFailException: the plan or a send task of the run
        failed (its result is missing), so the run ends failed too (this task and after_send
        are its leaves, both ALL_DONE); the line says which.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.logutil import mailbox_name

    keys = ("claimed", "sent", "unconfirmed", "failed", "requeued", "sending", "suppressed")
    outcomes = run_outcomes(database_url(), run_prefix(dag_id, run_id))
    total = {k: sum(o[k] for o in outcomes) for k in keys}
    for o in outcomes:
        log.info("run %s: mailbox %s (%s) %s", run_id, o["mailbox_id"],
                 mailbox_name(o["label"], o["display_name"], o["address"]),
                 " ".join(f"{k}={o[k]}" for k in keys))
    if batches is None:
        raise AirflowFailException("the plan failed (see its log): this run planned and sent "
                                   "nothing; fix what it names, then clear plan")
    planned = len(batches)
    ok = len([r for r in (results or []) if r is not None])
    # Held rows stay queued, so the ledger has no trace of them: the send tasks' own counts.
    held = sum(int(r.get("held", 0)) for r in (results or []) if r is not None)
    log.info("run summary: send tasks %s of %s succeeded; %s%s", ok, planned,
             " ".join(f"{k}={v}" for k, v in total.items()),
             f" held={held} (queued for later by the contact policy, a provider cap or the "
             f"calendar: the send tasks' notes say why)" if held else "")
    if ok < planned:
        raise AirflowFailException(f"{planned - ok} of {planned} send task(s) failed (see their "
                                   f"logs); this run: " + " ".join(f"{k}={v}" for k, v in total.items()))
    return {"batches": planned, "tasks_ok": ok, "totals": total, "held": held,
            "mailboxes": [{**{k: o[k] for k in keys}, "mailbox_id": o["mailbox_id"],
                           "mailbox": mailbox_name(o["label"], o["display_name"], o["address"])}
                          for o in outcomes]}


def after_send_task(outlet_events: Any) -> dict[str, Any]:
    """After the run's sends, whatever they did (the send DAG's ``after_send``, trigger rule
    ALL_DONE; it fails only when the database cannot be reached, so a failed send never keeps
    the asset events back): alert once about new unconfirmed emails and, while any is not listed
    by a Required Action, update the unconfirmed asset through
    :func:`outreach.airflow.defaults.unconfirmed_alias` (it schedules
    ``outreach_unconfirmed_review``; none: no asset event), see
    :func:`outreach.airflow.tasks_unconfirmed.flag_unconfirmed_task`; then update the event
    Assets with the new events (:func:`outreach.airflow.tasks_common.announce_events_task`),
    last, because it moves the announcement cursor.

    :param outlet_events: the task context's ``outlet_events``.
    :returns: ``{"unconfirmed": {"new", "unlisted"}, "events": extras by family}``.
    """
    from outreach.airflow.defaults import unconfirmed_alias, unconfirmed_asset
    from outreach.airflow.tasks_common import announce_events_task
    from outreach.airflow.tasks_unconfirmed import flag_unconfirmed_task

    flagged = flag_unconfirmed_task()
    if flagged["unlisted"]:
        outlet_events[unconfirmed_alias()].add(unconfirmed_asset(),
                                               extra={"unlisted": flagged["unlisted"]})
        log.info("Asset %s updated: %s unconfirmed email(s) for a Required Action",
                 unconfirmed_asset().name, len(flagged["unlisted"]))
    else:
        log.info("Asset %s not updated: nothing for a Required Action", unconfirmed_asset().name)
    return {"unconfirmed": flagged, "events": announce_events_task("send", outlet_events)}
