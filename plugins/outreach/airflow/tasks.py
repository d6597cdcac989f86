"""The task bodies: what each DAG task does, in terms of the domain package. DAG files
(``dags/``) call these, :mod:`outreach.airflow.defaults` and :mod:`outreach.airflow.alerts`, and
nothing else. Connections come from :mod:`outreach.airflow.connections`; nothing here runs at
import time.
"""

from __future__ import annotations

from typing import Any

from outreach.airflow.alerts import (
    alert,
    alert_bounce_warnings,
    alert_pauses,
    alert_preflight,
    mailbox_names,
    refused_logins,
)
from outreach.airflow.connections import (
    database_url,
    dkim_private_key,
    imap_account,
    optional_unsubscribe_secret,
    postmaster_credentials,
    settings,
    smtp_connector,
)
from outreach.airflow.defaults import REVIEW_OPTIONS
from outreach.airflow.who import airflow_who
from outreach.logutil import log, mask


def config_check_task(*, marketing: bool = False) -> None:
    """Check every setting and the outreach database (:func:`outreach.airflow.configcheck.check`, scopes
    settings and database) before a DAG's work: the first step of the send DAG's preflight, of
    the import, source import, transactional and inbox DAGs' first task. Each DAG's own tasks
    check the connections they use (the preflight the DKIM keys, the inbox reader its IMAP
    account).

    :param marketing: the unsubscribe URL and secret are required too (the send DAG).
    :raises airflow.sdk.exceptions.AirflowFailException: a problem, all of them in one line
        (no retry: a bad value stays bad until someone changes it; clear the task after).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.airflow.configcheck import ConfigReport, check_database, check_settings

    report = ConfigReport()
    check_settings(report, marketing=marketing)
    check_database(report, database_url)  # the tasks' database: never an embedded one
    if not report.ok:
        for problem in report.problems:
            log.error("config: %s", problem)
        raise AirflowFailException(report.one_line())
    log.info(report.summary())


def import_task(campaign_file: str, mailbox_file: str, leads_file: str,
                suppressions_file: str | None) -> dict[str, Any]:
    """Import a do-not-contact list (optional) then a leads CSV; return the import summary.

    Paths are relative to the project root; the CSVs must lie inside ``OUTREACH_IMPORT_ROOTS``
    and the campaign and mailbox files inside the project's ``include/``
    (:func:`outreach.leads.import_path`): the form's text reads no other file. A progress line
    is logged every :data:`outreach.leads.PROGRESS_ROWS` rows; the summary is logged last.

    :raises airflow.sdk.exceptions.AirflowFailException: a file is missing, outside the import
        folders or unusable as a whole (no email column, not UTF-8, an invalid campaign or
        mailbox file), or nothing was imported (no data rows, or every row invalid; the run and
        its problems are stored): the task fails without retrying (a retry reads the same
        file), with one line naming the file and what to fix. Some bad rows never fail it: they
        are reported and the good rows imported.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.campaign import ConfigError
    from outreach.leads import ImportFileError

    config_check_task()
    try:
        return _import(database_url(), campaign_file, mailbox_file, leads_file, suppressions_file)
    except (ImportFileError, ConfigError, FileNotFoundError) as exc:
        # The file as a whole is missing or unusable: a retry reads the same file, so the task
        # fails at once with what to fix.
        raise AirflowFailException(f"{exc} (fix the file or the path and trigger again)") from None


def announce_leads(outlet_events: Any, summary: dict[str, Any]) -> str | None:
    """Update the leads Asset of the campaign a file import imported into
    (``outreach://leads/<key>``, through :func:`outreach.airflow.defaults.leads_alias`), as a
    source's import does, so ``outreach_queue_due`` queues its leads at once; return the URI
    (``None``: nothing imported, no event).

    :param outlet_events: the task context's ``outlet_events``.
    :param summary: :func:`import_task`'s result.
    """
    from airflow.sdk import Asset

    from outreach.airflow.defaults import leads_alias
    from outreach.sources import lead_asset_uri

    leads = summary.get("leads") or {}
    key = leads.get("campaign_key")
    counts = {k: int(leads.get(k) or 0) for k in ("imported", "updated", "enrolled")}
    if not key or not any(counts.values()):
        return None
    uri = lead_asset_uri(key)
    outlet_events[leads_alias()].add(Asset(uri), extra=counts)
    log.info("leads Asset %s updated: outreach_queue_due queues the new leads now", uri)
    return uri


def announce_events_task(announcer: str, outlet_events: Any) -> dict[str, dict[str, Any]]:
    """Update the event Assets of ``announcer``'s families (``outreach://events/<family>``,
    through :func:`outreach.airflow.defaults.events_alias`) that have new events, each with the
    id range in its extra (:func:`outreach.eventassets.collect`); a family without new events
    gets no asset event. Return the extras by family.

    :param announcer: ``inbox`` or ``send`` (:data:`outreach.eventassets.ANNOUNCERS`).
    :param outlet_events: the task context's ``outlet_events``.
    :raises outreach.db.OutreachDBError: the database cannot be reached (the cursor stays: the
        retry announces the same events).
    """
    from airflow.sdk import Asset

    from outreach.airflow.defaults import events_alias
    from outreach.eventassets import ANNOUNCERS, asset_uri, collect

    ranges = collect(database_url(), announcer)
    for family, extra in ranges.items():
        outlet_events[events_alias(announcer)].add(Asset(asset_uri(family)), extra=extra)
        log.info("Asset %s updated: %s new event(s), ids %s..%s", asset_uri(family),
                 extra["count"], extra["first_id"], extra["last_id"])
    if not ranges:
        log.info("no new events of %s: no asset event",
                 ", ".join(asset_uri(f) for f in ANNOUNCERS[announcer]))
    return ranges


def _import(url: str, campaign_file: str, mailbox_file: str, leads_file: str,
            suppressions_file: str | None) -> dict[str, Any]:
    from outreach.leads import PROGRESS_ROWS, ImportFileError, import_leads, import_path, progress_line
    from outreach.paths import project_root
    from outreach.suppression import import_suppressions

    # The form's campaign and mailbox files are the project's reviewed configuration: nothing
    # outside its include/ folder is read (a YAML error would quote the file's lines).
    config = (project_root() / "include",)
    for path in (campaign_file, mailbox_file):
        import_path(path, roots=config, hint="campaign and mailbox files live in the project's include/")
    out: dict[str, Any] = {}
    if suppressions_file:
        sup = import_suppressions(url, suppressions_file, who=airflow_who("import"))
        for p in sup.problems:
            log.warning("%s, %s", suppressions_file, p)
        log.info("suppressions %s: added=%s known=%s invalid=%s cancelled=%s", suppressions_file,
                 sup.added, sup.known, sup.invalid, sup.cancelled)
        out["suppressions"] = {"added": sup.added, "known": sup.known, "invalid": sup.invalid}
    result = import_leads(url, campaign_file, mailbox_file, leads_file,
                          progress=lambda rows, seconds: log.info(progress_line(leads_file, rows, seconds)),
                          progress_every=PROGRESS_ROWS)
    for p in result.problems:
        log.warning("%s, %s", leads_file, p)
    if result.problems_omitted:
        log.warning("%s: %s more problems (outreach import show %s --problems)", leads_file,
                    result.problems_omitted, result.run_id)
    if result.suppressed_lines:
        log.info("%s: suppressed addresses on lines %s (not stored)", leads_file,
                 result.suppressed_lines)
    log.info(result.summary())  # last: the line an operator reads first in the task log
    if (why := result.nothing_imported()) is not None:
        raise ImportFileError(why)
    out["leads"] = result.to_dict()
    return out


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
    """Run the DNS preflight for every active mailbox's domain (and DKIM selector).

    Mode ``OUTREACH_PREFLIGHT``: ``off`` skips it; ``warn`` logs failures and blocks nothing;
    ``block`` returns the mailboxes of failing domains in ``blocked`` so the plan skips them.
    ``OUTREACH_SENDING_IP`` (optional) is checked for SPF and PTR; ``OUTREACH_DNS_NAMESERVER``
    (optional, ``IP[:PORT]``) replaces the system resolver.

    Every FAIL raises an alert (:func:`alert_preflight`: once per domain, failing checks and
    UTC day), in ``warn`` and ``block`` mode.

    Then every active mailbox's relay is asked what it can carry
    (:func:`outreach.preflight.check_relays`): a relay without SMTPUTF8 while queued rows need it
    is a warning naming the relay and how many rows it cannot carry (those rows fail permanently
    when sent); it blocks nothing.

    :returns: ``{"mode", "blocked": [{"mailbox_id", "domain", "reason"}], "domains": {domain:
        "PASS"|"WARN"|"FAIL"}, "failed": {domain: [check, …]}, "relays": {mailbox id:
        {"status", "cannot_carry"}}}``.
    """
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


def plan_task(checked: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Reap stale rows, then plan this run's batches (one mapped send task each).

    Mailboxes the preflight blocked (``checked["blocked"]``, see :func:`preflight_task`) are left
    out of the batches; each one that had rows due gets a batch of its own that sends nothing and
    fails (see :func:`send_task`), so a blocked mailbox shows as a failed task, never as green.
    Labels name mailboxes by their label: ``batch 1/2: anna — sales 13, ben — partnerships 12``.
    No batch at all (nothing due) leaves ``send_batch`` skipped; the reason is logged here.
    """
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
    log.info("plan: %s batch(es): %s", len(batches), [b["label"] for b in batches])
    return batches


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


def send_task(batch: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """Claim and send one planned batch across its mailboxes (DKIM-signed when a mailbox has a
    key); return its summary (one summary line per mailbox is logged).

    The task's label (``context["batch_label"]``, its ``map_index_template``) first says what was
    planned, then what the task did over all its tries, per mailbox by name (``anna — sales:
    sent 30, requeued 24``). The log has one line per email handed over (id, masked recipient,
    step, mailbox, outcome: :func:`outreach.send.describe`).

    :raises outreach.send.MailboxUnreachable: a mailbox's SMTP connection, login or DKIM key
        failed before any of its rows was handed over (its rows are back in the queue, attempts
        not counted; the other mailboxes of the batch were sent): the task fails with one line
        naming the connection and the reply (after its retries: the relay may come back).
    :raises airflow.sdk.exceptions.AirflowFailException: the batch is a mailbox the preflight
        blocked (nothing claimed), or rows were left unconfirmed (they need a person: the
        Required Action of ``outreach_unconfirmed_review`` or ``outreach resolve``). No retry:
        a retry would not change either. Clearing the task is safe: it claims fresh rows or none.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.send import MailboxUnreachable, send_planned

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
        summary = send_planned(url, batch["quotas"], smtp_connector, settings(),
                               label=batch["label"], worker=worker, dkim_keys=dkim_private_key)
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

    :returns: ``{"batches", "tasks_ok", "totals": {claimed, sent, …}, "mailboxes": […]}``.
    :raises airflow.sdk.exceptions.AirflowFailException: a send task of the run failed (its
        result is missing), so the run ends failed too; the line says how many.
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
    planned = len(batches or [])
    ok = len([r for r in (results or []) if r is not None])
    log.info("run summary: send tasks %s of %s succeeded; %s", ok, planned,
             " ".join(f"{k}={v}" for k, v in total.items()))
    if ok < planned:
        raise AirflowFailException(f"{planned - ok} of {planned} send task(s) failed (see their "
                                   f"logs); this run: " + " ".join(f"{k}={v}" for k, v in total.items()))
    return {"batches": planned, "tasks_ok": ok, "totals": total,
            "mailboxes": [{**{k: o[k] for k in keys}, "mailbox_id": o["mailbox_id"],
                           "mailbox": mailbox_name(o["label"], o["display_name"], o["address"])}
                          for o in outcomes]}


def pause_task(mailbox: str, reason: str, by: str) -> dict[str, Any]:
    """Pause a mailbox (id or address) for an operator; return what changed."""
    from outreach.mailboxes import pause_mailbox

    change = pause_mailbox(database_url(), mailbox, reason, by, who=airflow_who(by))  # logs it
    return {"mailbox_id": change.mailbox_id, "changed": change.changed, "status": change.status}


def resume_task(mailbox: str, by: str, why: str) -> dict[str, Any]:
    """Resume a mailbox (id or address) for an operator; return what changed."""
    from outreach.mailboxes import resume_mailbox

    change = resume_mailbox(database_url(), mailbox, by, why, who=airflow_who(by))  # logs it
    return {"mailbox_id": change.mailbox_id, "changed": change.changed, "status": change.status}


def lead_stop_task(address: str, campaign: str, reason: str, by: str) -> dict[str, Any]:
    """Stop a lead's enrolment in a campaign for an operator; return what changed (address
    masked). See :func:`outreach.enrollments.stop_lead`."""
    from outreach.enrollments import stop_lead

    result = stop_lead(database_url(), address, campaign, reason, by,
                       who=airflow_who(by))  # logs the change
    return {"enrollment_id": result.enrollment_id, "address": result.address,
            "changed": result.changed, "status": result.status, "cancelled": result.cancelled}


def lead_erase_task(address: str, reason: str, by: str) -> dict[str, Any]:
    """Erase a person for an admin (:func:`outreach.erasure.erase`); return the erasure's id
    and counts per table (address masked). Logs one line.

    :raises outreach.erasure.ErasureError: no key, a reason naming the person, or an email to
        the person being sent right now (the task's retry runs it again).
    """
    from outreach.erasure import erase

    result = erase(database_url(), address, actor=by, reason=reason, who=airflow_who(by))
    return {"erasure_id": result.erasure_id, "address": result.address, "counts": result.counts}


def campaign_pause_task(campaign: str, reason: str, by: str) -> dict[str, Any]:
    """Pause a campaign (key) for an operator; return what changed."""
    from outreach.campaign_pause import pause_campaign

    change = pause_campaign(database_url(), campaign, reason, by, who=airflow_who(by))  # logs it
    return {"campaign": change.campaign, "changed": change.changed, "status": change.status}


def campaign_resume_task(campaign: str, by: str, why: str) -> dict[str, Any]:
    """Resume a paused campaign (key) for an operator; return what changed."""
    from outreach.campaign_pause import resume_campaign

    change = resume_campaign(database_url(), campaign, by, why, who=airflow_who(by))  # logs it
    return {"campaign": change.campaign, "changed": change.changed, "status": change.status}


def campaign_test_send_task(campaign: str, to: list[str], by: str, *, lead: str | None = None,
                            step: int = 1) -> list[dict[str, Any]]:
    """Send a step of a campaign to seed addresses (:func:`outreach.testsend.send_to_seeds`);
    return one ``{recipient (masked), sent, message_id, reply}`` per seed.

    :raises RuntimeError: a seed was not accepted (the task fails; the message names them,
        masked).
    """
    from dataclasses import asdict

    from outreach.testsend import send_to_seeds

    results = send_to_seeds(database_url(), campaign, to, settings(), smtp_connector, actor=by,
                            lead=lead, step=step, dkim_keys=dkim_private_key)
    for r in results:
        log.info("test send step %s to %s: %s", step, mask(r.recipient),
                 f"sent, Message-ID <{r.message_id}>" if r.sent else f"NOT sent: {r.reply}")
    failed = [r for r in results if not r.sent]
    if failed:
        raise RuntimeError("test send: not sent to " + "; ".join(
            f"{mask(r.recipient)} ({r.reply})" for r in failed))
    return [{**asdict(r), "recipient": mask(r.recipient)} for r in results]  # XCom is logged


def postmaster_fetch_task() -> dict[str, Any]:
    """Fetch and store the Postmaster Tools figures and compliance of every sending domain."""
    from outreach.health import HealthSettings
    from outreach.postmaster import PostmasterClient, fetch_and_store

    health = HealthSettings.from_env()
    client = PostmasterClient(postmaster_credentials(), base_url=health.postmaster_base_url)
    return fetch_and_store(database_url(), client, days=health.postmaster_days).to_dict()


def spam_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose latest known Postmaster spam rate is above the threshold; alert
    once per automatic pause (:func:`alert_pauses`)."""
    from outreach.health import HealthSettings, pause_on_spam_rate

    health = HealthSettings.from_env()
    url = database_url()
    verdicts = [v.to_dict() for v in pause_on_spam_rate(url, threshold=health.spam_rate_threshold)]
    alert_pauses(url)
    return verdicts


def bounce_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose hard-bounce rate is above the threshold; alert once per automatic
    pause, and once a day per mailbox above the warning level (``OUTREACH_BOUNCE_WARN_RATE``)."""
    from outreach.health import HealthSettings, pause_on_bounce_rate

    health = HealthSettings.from_env()
    url = database_url()
    verdicts = [v.to_dict() for v in pause_on_bounce_rate(
        url, threshold=health.bounce_rate_threshold, min_sends=health.bounce_min_sends,
        window_days=health.bounce_window_days)]
    alert_pauses(url)
    alert_bounce_warnings(url)
    return verdicts


def complaint_rate_task() -> list[dict[str, Any]]:
    """Pause mailboxes whose feedback-loop complaint rate is above the threshold; alert once per
    automatic pause (:func:`alert_pauses`)."""
    from outreach.health import HealthSettings, pause_on_complaint_rate

    health = HealthSettings.from_env()
    url = database_url()
    verdicts = [v.to_dict() for v in pause_on_complaint_rate(
        url, threshold=health.complaint_rate_threshold,
        min_sends=health.bounce_min_sends, window_days=health.bounce_window_days)]
    alert_pauses(url)
    return verdicts


def parse_ids(text: str | list[int] | None) -> list[int]:
    """Parse email ids typed as one comma-separated text (``"288, 290"``); ``[]`` when empty.

    :raises ValueError: a part is not a whole number (named).
    """
    if isinstance(text, list):
        return [int(i) for i in text]
    ids = []
    for part in (text or "").replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise ValueError(f"email_ids: {part!r} is not an email id (whole numbers, "
                             "comma-separated, e.g. 288, 290)")
        ids.append(int(part))
    return ids


def _checked_ids(url: str, email_ids: str | list[int] | None) -> list[int]:
    """Parse the form's ids and check that each is an unconfirmed email.

    :raises airflow.sdk.exceptions.AirflowFailException: a malformed id, or ids that are not
        unconfirmed emails (listed).
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.resolve import list_unconfirmed

    try:
        ids = parse_ids(email_ids)
    except ValueError as exc:
        raise AirflowFailException(str(exc)) from None
    if ids:
        found = {r["id"] for r in list_unconfirmed(url, ids=ids)}
        unknown = [i for i in ids if i not in found]
        if unknown:
            raise AirflowFailException(f"email_ids: not unconfirmed emails: {unknown} (see "
                                       "outreach unconfirmed); nothing was resolved")
    return ids


def evidence_task(email_ids: str | list[int] | None, campaign_key: str | None,
                  mailbox: str | None) -> list[dict[str, Any]]:
    """Log each selected unconfirmed email (:func:`outreach.resolve.describe_unconfirmed`, with
    a late acceptance if any), its Message-ID and what its mailbox's Sent folder says
    (:func:`outreach.resolve.sent_evidence`); return ``[{email_id, message_id, evidence, found}]``.

    :param email_ids: comma-separated ids (:func:`parse_ids`), checked like :func:`resolve_task`.
    """
    from outreach.resolve import describe_unconfirmed, list_unconfirmed, row_message_id, sent_evidence

    url = database_url()
    rows = list_unconfirmed(url, ids=_checked_ids(url, email_ids) or None,
                            campaign_key=campaign_key, mailbox=mailbox)
    sent = sent_evidence(rows, imap_account)
    out = []
    for r in rows:
        out.append({"email_id": r["id"], "message_id": row_message_id(r),
                    "evidence": sent[r["id"]].text(), "found": sent[r["id"]].state == "found"})
        log.info("unconfirmed: %s", describe_unconfirmed(r))
        log.info("    Message-ID <%s>: %s", out[-1]["message_id"], out[-1]["evidence"])
    log.info("%s unconfirmed email(s), %s found in a Sent folder", len(out),
             sum(o["found"] for o in out))
    return out


def resolve_task(decision: str, resolved_by: str, email_ids: str | list[int] | None,
                 campaign_key: str | None, mailbox: str | None, note: str) -> dict[str, Any]:
    """Resolve unconfirmed emails (see :mod:`outreach.resolve`); return the ids resolved/skipped.
    The DAG's ``evidence`` task has listed the selected emails first.

    :param decision: ``was_sent``, ``not_sent``, or ``was_sent_if_found``: every selected row
        found in its mailbox's Sent folder is resolved ``was_sent`` with the evidence as its note
        (:func:`outreach.resolve.resolve_found`); the rest stay. There is no default.
    :param email_ids: comma-separated ids (:func:`parse_ids`), or empty to select by campaign
        and/or mailbox.
    :raises airflow.sdk.exceptions.AirflowFailException: no decision, an id is malformed or not
        unconfirmed (listed; nothing is resolved then), no selection, or nothing was resolved.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.resolve import DECISIONS, resolve, resolve_found

    if decision not in (*DECISIONS, "was_sent_if_found"):
        raise AirflowFailException(f"decision: choose one of {[*DECISIONS, 'was_sent_if_found']} "
                                   "(there is no default)")
    url = database_url()
    ids = _checked_ids(url, email_ids)
    try:
        if decision == "was_sent_if_found":
            if ids:
                raise ValueError("was_sent_if_found selects by campaign and/or mailbox, not by ids")
            result = resolve_found(url, resolved_by, imap_account, campaign_key=campaign_key,
                                   mailbox=mailbox, who=airflow_who(resolved_by))
        else:
            result = resolve(url, decision, resolved_by, ids=ids or None,
                             campaign_key=campaign_key, mailbox=mailbox, note=note,
                             who=airflow_who(resolved_by))
    except ValueError as exc:
        raise AirflowFailException(str(exc)) from None
    if not result.resolved:
        raise AirflowFailException(f"nothing was resolved: no unconfirmed email matches "
                                   f"(ids {ids or '-'}, campaign {campaign_key or '-'}, mailbox "
                                   f"{mailbox or '-'}; skipped {result.skipped})")
    return {"decision": decision, "resolved": result.resolved, "skipped": result.skipped}


def requeue_task(failure_kind: str, requested_by: str, reason: str, email_ids: list[int] | None,
                 campaign_key: str | None, mailbox: str | None) -> dict[str, Any]:
    """Requeue emails that failed without being accepted (see
    :func:`outreach.resolve.requeue_failed`); return the ids requeued and skipped (with why)."""
    from outreach.resolve import requeue_failed

    result = requeue_failed(database_url(), failure_kind, requested_by, reason, ids=email_ids,
                            campaign_key=campaign_key, mailbox=mailbox,
                            who=airflow_who(requested_by))
    return {"failure_kind": failure_kind, "requeued": result.requeued,
            "skipped": {str(k): v for k, v in result.skipped.items()}}


def report_task() -> dict[str, Any]:
    """Print the campaign report (text tables) to the task log; return its totals."""
    from outreach.report import collect, render_text

    report = collect(database_url())
    for line in render_text(report).splitlines():
        log.info(line)
    return report["totals"] or {}


def suppress_task(value: str, reason: str, requested_by: str) -> dict[str, Any]:
    """Suppress an address or domain and cancel its queued steps, in one transaction."""
    from outreach import db
    from outreach.suppression import suppress

    with db.transaction(database_url()) as conn:
        added, cancelled = suppress(conn, value, reason, f"operator:{requested_by}",
                                    actor=requested_by, who=airflow_who(requested_by))
    log.info("suppress %s (%s) by %s: %s; cancelled %s queued email(s)", mask(value), reason,
             requested_by, "added" if added else "already suppressed", cancelled)
    return {"added": added, "cancelled": cancelled}


def unsuppress_task(value: str, requested_by: str, why: str) -> dict[str, Any]:
    """Remove the active suppression of an address or domain, recording who and why."""
    from outreach import db
    from outreach.suppression import unsuppress

    with db.transaction(database_url()) as conn:
        result = unsuppress(conn, value, actor=requested_by, note=why,
                            who=airflow_who(requested_by))
    log.info("unsuppress %s by %s (%s): removed=%s (was %s) still_suppressed=%s", mask(value),
             requested_by, why, result.removed, result.reason, result.still_suppressed)
    return {"value": mask(value), "removed": result.removed, "reason": result.reason,
            "still_suppressed": result.still_suppressed}


TRANSACTIONAL_PARAMS = frozenset({"delivery_key", "to", "template", "context", "mailbox"})


def transactional_enqueue_task(params: dict[str, Any],
                               conf: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Enqueue the transactional email a DAG run asks for and commit; return its row, or
    ``None`` when the run names no delivery key (a scheduled send cycle). Triggering twice with
    the same key enqueues once.

    :param params: the run's params (``delivery_key``, ``to``, ``template``, ``context``,
        optional ``mailbox``), filled from its conf.
    :param conf: the run's conf as triggered, to refuse keys the DAG does not take.

    :raises airflow.sdk.exceptions.AirflowFailException: the request is invalid (the message names
        the field: an unknown conf key, a blank key, ``to`` without a key, a bad address,
        template or context): retrying cannot help, so the task fails without retries.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach import db
    from outreach.transactional import TransactionalError, enqueue

    config_check_task()
    unknown = sorted((set(params) | set(conf or {})) - TRANSACTIONAL_PARAMS)
    if unknown:
        raise AirflowFailException(f"unknown conf key(s) {unknown}: the conf takes "
                                   f"{sorted(TRANSACTIONAL_PARAMS)}")
    key = params.get("delivery_key")
    if key is None:
        if params.get("to"):
            raise AirflowFailException("delivery_key: required with 'to' (make it when the "
                                       "request arrives and reuse it on every retry)")
        log.info("no delivery_key in this run's conf: a send cycle only")
        return None
    if not isinstance(key, str) or not key.strip():
        # Never stripped: the key is compared exactly, as the application's enqueue does.
        raise AirflowFailException("delivery_key: must not be blank")
    try:
        with db.connect(database_url()) as conn, conn.transaction():
            result = enqueue(conn, key, params.get("to") or "", params.get("template") or "",
                             params.get("context") or {}, mailbox=params.get("mailbox") or None)
    except TransactionalError as exc:
        raise AirflowFailException(f"cannot enqueue delivery key {key!r}: {exc}") from None
    return {"email_id": result.email_id, "created": result.created, "status": result.status}


def transactional_send_task() -> dict[str, Any]:
    """One transactional send cycle (see :func:`outreach.transactional.send_due`); return its
    summary (one summary line per mailbox is logged)."""
    from outreach.send import MailboxUnreachable
    from outreach.transactional import send_due

    try:
        return send_due(database_url(), smtp_connector, settings(unsubscribe=False), worker=None,
                        dkim_keys=dkim_private_key).to_dict()
    except MailboxUnreachable as exc:
        refused_logins([f["conn_id"] for f in exc.failures], exc)
        raise


def source_import_task(campaign_file: str) -> dict[str, Any]:
    """Import one campaign's declared source (:func:`outreach.sources.import_source`); log the
    problems and one summary line per import; return the counts.

    :raises outreach.leads.ImportFileError: rows or an object unusable as a whole (the task
        fails; clearing it is safe: an object is imported once, a SQL source re-read changes
        only what changed).
    :raises outreach.sources.SourceError: the source cannot be read.
    """
    from outreach.sources import import_source

    config_check_task()
    results = import_source(database_url(), campaign_file, "include/mailboxes.yaml")
    total: dict[str, Any] = {"imports": len(results), "imported": 0, "updated": 0,
                             "unchanged": 0, "invalid": 0, "suppressed": 0, "stopped": 0,
                             "run_ids": []}
    for r in results:
        for p in r.problems[:100]:
            log.warning("%s, %s", r.file, p)
        log.info(r.summary())
        for k in ("imported", "updated", "unchanged", "invalid", "suppressed", "stopped"):
            total[k] += getattr(r, k)
        total["run_ids"].append(r.run_id)
    if not results:
        log.info("%s: nothing new in the source", campaign_file)
    return total


def suppression_source_task(name: str) -> dict[str, Any]:
    """Import one do-not-contact source of the suppression sources file
    (:func:`outreach.airflow.suppression_sources.import_source`, which logs each bad row with
    source, row and field, and one summary line per import); return the counts.

    :raises outreach.sources.SourceError: the source is not declared or cannot be read.
    :raises outreach.leads.ImportFileError: object(s) of a file source unusable as a whole (the
        task fails after importing the others; clearing it is safe: known entries add nothing).
    """
    from outreach.airflow.suppression_sources import import_source, source_named

    config_check_task()
    results = import_source(database_url(), source_named(name))
    total: dict[str, Any] = {"imports": len(results), "added": 0, "known": 0, "invalid": 0,
                             "cancelled": 0}
    for r in results:  # each import's problems and summary are logged as it commits
        for k in ("added", "known", "invalid", "cancelled"):
            total[k] += getattr(r, k)
    if not results:
        log.info("suppression source %s: nothing new", name)
    return total


def inbox_targets_task() -> list[dict[str, Any]]:
    """Return the IMAP accounts to read this run (see :func:`outreach.inbox.plan_targets`)."""
    from outreach.inbox import plan_targets

    config_check_task()
    targets = plan_targets(database_url())
    log.info("inbox: %s account(s) to read: %s", len(targets), [t["label"] for t in targets])
    return targets


def inbox_read_task(target: dict[str, Any]) -> dict[str, Any]:
    """Read one account (see :func:`outreach.inbox.read_target`); return its summary.

    :raises outreach.inbox.InboxError: the mailbox could not be read; the one-line message names
        the mailbox, the connection and the IMAP stage, and the task fails (clearing it is safe).
    """
    from outreach.inbox import InboxError, read_target

    try:
        return read_target(database_url(), target, imap_account,
                           unsubscribe_secret=optional_unsubscribe_secret()).to_dict()
    except InboxError as exc:
        refused_logins([target["conn_id"]], exc)
        raise


def inbox_summary_task(results: list[dict[str, Any]] | None) -> dict[str, int]:
    """Add up the mailbox summaries of an inbox run and log one line."""
    from outreach.inbox import COUNTED

    total = {k: 0 for k in ("fetched", *COUNTED)}
    for r in results or []:
        if r:
            for k in total:
                total[k] += r.get(k, 0)
    log.info("inbox run: mailboxes=%s %s", len(list(results or [])),
             " ".join(f"{k}={v}" for k, v in total.items()))
    return total


REVIEW_DECISIONS = {"was sent": "was_sent", "not sent, requeue": "not_sent"}


def _review_text(rows: list[dict[str, Any]]) -> str:
    """The Required Action's body (Markdown): one table row per email, cells made inert. The
    Sent-folder evidence is the second column (what was checked, :meth:`SentEvidence.text`), so
    it is on screen next to the answers; Message-IDs are code spans (never ``mailto:`` links)."""
    from outreach.approval import md_cell as cell
    from outreach.approval import md_code as code

    lines = ["Check each mailbox's **Sent Items** (or the provider's logs) for these Message-IDs "
             "before answering. *was sent* records them as sent by you; *not sent, requeue* sends "
             "them again with the same Message-ID (it asks you to confirm); *leave for later* "
             "changes nothing.", "",
             "| id | Sent-folder evidence | campaign | step | recipient | mailbox | Message-ID | "
             "handed over | stage | reply |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [cell(r["id"]), cell(r["evidence"]), cell(r["campaign"]), cell(r["step"]),
                 cell(r["recipient"]), cell(r["mailbox"]), code(r["message_id"]),
                 cell(r["handed_over_at"] or r["claimed_at"]), cell(r["stage"]), cell(r["error"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def review_confirm_text(collected: dict[str, Any]) -> dict[str, str]:
    """Return the confirmation step's ``subject`` and ``body`` (Markdown) for a *not sent,
    requeue* answer: what the answer does, and the same table with the evidence.

    :param collected: :func:`review_collect_task`'s result.
    """
    n = len(collected["ids"])
    return {"subject": f"Confirm: send {n} email(s) again?",
            "body": (f"**{REQUEUE_CONFIRM}** puts these {n} email(s) back in the queue: the next "
                     "send run hands them over again (same Message-ID). If a message *was* "
                     "delivered, its recipient gets it twice. Read the Sent-folder evidence "
                     "below first; *not checked* means nobody looked.\n\n"
                     + collected["body"].split("\n\n", 1)[-1])}


REQUEUE_CONFIRM = "yes, send them again"
REQUEUE_CANCEL = "no, leave them for later"
CONFIRM_OPTIONS = (REQUEUE_CONFIRM, REQUEUE_CANCEL)
"""The confirmation step's answers (``confirm_requeue`` in ``outreach_unconfirmed_review``)."""


def flag_unconfirmed_task() -> dict[str, Any]:
    """Alert once about unconfirmed emails never alerted before (one alert listing them, keys
    ``unconfirmed:<email id>``) and, while any unconfirmed email is not listed by a Required
    Action yet (no key ``review:<email id>``), let the task update the unconfirmed asset so
    ``outreach_unconfirmed_review`` opens a Required Action for them. The second condition is
    what catches up a review run missed while that DAG was paused: Airflow queues asset events
    only for unpaused DAGs, the database remembers what was listed.

    :returns: ``{"new": ids alerted now, "unlisted": ids no Required Action listed yet}``.
    :raises airflow.sdk.exceptions.AirflowSkipException: nothing to review (no asset event).
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach import db
    from outreach.resolve import unconfirmed_details
    from outreach.store import alerts as alerts_store

    url = database_url()
    rows = {r["id"]: r for r in unconfirmed_details(url)}
    new = alert("unconfirmed", [f"unconfirmed:{i}" for i in rows], lambda keys: (
        f"outreach: {len(keys)} new unconfirmed email(s): check Sent Items",
        "These emails may or may not have gone out (the end of DATA got no reply). Check the "
        "mailboxes' Sent Items, then answer the Required Action in Airflow "
        "(outreach_unconfirmed_review) or run outreach resolve.\n\n" + "\n".join(
            f"email {r['id']}: {r['campaign']} step {r['step']}, to {r['recipient']} from "
            f"{r['mailbox']}, Message-ID {r['message_id']}, {r['stage']}"
            for r in (rows[int(k.split(':')[1])] for k in keys))), url)
    with db.connect(url, autocommit=True) as conn:
        unlisted = [int(k.split(":")[1]) for k in alerts_store.alert_keys_absent(
            conn, event_keys=[f"review:{i}" for i in rows])]
    if not unlisted:
        raise AirflowSkipException("no unconfirmed emails that a Required Action has not listed")
    log.info("unconfirmed emails for a Required Action: %s (alerted now: %s)", unlisted,
             [int(k.split(":")[1]) for k in new])
    return {"new": [int(k.split(":")[1]) for k in new], "unlisted": unlisted}


def review_collect_task(run_id: str) -> dict[str, Any]:
    """List the unconfirmed emails no Required Action listed yet (each is listed once: keys
    ``review:<email id>`` in ``outreach.alerts``) for this run's Required Action.

    :returns: ``{"ids": [...], "body": markdown, "subject": str, "confirm_subject": str,
        "confirm_body": markdown}`` (the last two: the confirmation step's, :func:`review_confirm_text`).
    :raises airflow.sdk.exceptions.AirflowSkipException: nothing new to review.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach import db
    from outreach.resolve import unconfirmed_details
    from outreach.store import alerts as alerts_store

    url = database_url()
    # With the Sent-folder search (IMAP) where the mailbox has an account: the person deciding
    # sees whether the message is in the mailbox's Sent folder.
    rows = {r["id"]: r for r in unconfirmed_details(url, accounts=imap_account)}
    with db.transaction(url) as conn:
        new = [int(key.split(":")[1]) for key in alerts_store.alert_claim_many(
            conn, event_keys=[f"review:{i}" for i in rows], kind="required_action",
            subject=f"Required Action {run_id}", body="")]
    if not new:
        raise AirflowSkipException("no unconfirmed emails that a Required Action has not listed")
    listed = [rows[i] for i in new]
    log.info("Required Action for %s unconfirmed email(s): ids %s", len(new), new)
    for r in listed:
        log.info("  email %s, Message-ID <%s>: %s", r["id"], r["message_id"], r["evidence"])
    out = {"ids": new, "subject": f"{len(new)} unconfirmed email(s): were they sent?",
           "body": _review_text(listed)}
    confirm = review_confirm_text(out)
    return {**out, "confirm_subject": confirm["subject"], "confirm_body": confirm["body"]}


def review_record_task(collected: dict[str, Any], response: dict[str, Any], dag_id: str,
                       run_id: str, confirmation: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record the Required Action's answer for exactly the listed emails, as ``outreach
    resolve`` records it (:func:`outreach.resolve.resolve`), by the Airflow user who answered.

    :param collected: :func:`review_collect_task`'s result (the listed ids).
    :param response: the HITL task's result: ``chosen_options``, ``responded_by_user``
        (``{"id", "name"}``, from Airflow's login, not typed).
    :param confirmation: the confirmation step's result (same shape; ``None`` when it was
        skipped). *not sent, requeue* is applied only when it says :data:`REQUEUE_CONFIRM`;
        otherwise the emails are left for later.
    :raises airflow.sdk.exceptions.AirflowFailException: no user or no option in the answer.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from outreach.resolve import resolve

    chosen = (response or {}).get("chosen_options") or []
    user = (response or {}).get("responded_by_user") or {}
    if len(chosen) != 1 or chosen[0] not in REVIEW_OPTIONS or not user.get("name"):
        raise AirflowFailException(f"the Required Action's answer is unusable: options {chosen}, "
                                   f"user {user.get('name')!r}")
    ids = list(collected["ids"])
    if chosen[0] == "not sent, requeue":
        confirmed = ((confirmation or {}).get("chosen_options") or [None])[0]
        if confirmed != REQUEUE_CONFIRM:
            log.info("Required Action: %s chose 'not sent, requeue' for emails %s but did not "
                     "confirm it (%r); they stay unconfirmed", user["name"], ids, confirmed)
            return {"decision": "leave_for_later", "resolved": [], "skipped": ids,
                    "by": user["name"]}
        user = (confirmation or {}).get("responded_by_user") or user
    if chosen[0] == "leave for later":
        log.info("Required Action: %s left emails %s for later; they stay unconfirmed "
                 "(outreach_resolve_unconfirmed or outreach resolve decide them later)",
                 user["name"], ids)
        return {"decision": "leave_for_later", "resolved": [], "skipped": ids,
                "by": user["name"]}
    from outreach.audit import Who

    result = resolve(database_url(), REVIEW_DECISIONS[chosen[0]], user["name"], ids=ids,
                     note=f"Required Action {dag_id}/{run_id} (Airflow user id {user.get('id')})",
                     who=Who(user["name"], "airflow", dag_id, run_id))
    return {"decision": result.decision, "resolved": result.resolved, "skipped": result.skipped,
            "by": user["name"]}


APPROVE, REJECT = "approve", "reject"
"""The launch approval's answers (``decide`` in ``outreach_campaign_approval``)."""


def approval_preflight(mailboxes: list[dict[str, Any]]) -> dict[str, str]:
    """Return the DNS preflight result per sending domain of ``mailboxes`` (``{domain,
    dkim_selector, dkim_key_conn_id}``), as the send DAG's preflight checks them
    (:func:`outreach.preflight.run_preflight`, ``OUTREACH_SENDING_IP``,
    ``OUTREACH_DNS_NAMESERVER``): ``PASS``, ``WARN: checks``, ``FAIL: checks``, or ``not checked
    (OUTREACH_PREFLIGHT=off)``. No alert: the send run's preflight alerts."""
    from outreach.preflight import make_resolver, run_preflight
    from outreach.settings import PreflightSettings

    if preflight_mode() == "off":
        return {m["domain"]: "not checked (OUTREACH_PREFLIGHT=off)" for m in mailboxes}
    checks = PreflightSettings()
    resolver = make_resolver(checks.dns_nameserver)
    out: dict[str, str] = {}
    for m in mailboxes:
        report = run_preflight(m["domain"], selector=m["dkim_selector"],
                               sending_ip=checks.sending_ip, dkim_public_key=_expected_dkim(m),
                               resolver=resolver)
        failed = [c.name for c in report.checks if c.status == "FAIL"]
        warned = [c.name for c in report.checks if c.status == "WARN"]
        verdict = (f"FAIL: {', '.join(failed)}" if failed else
                   f"WARN: {', '.join(warned)}" if warned else "PASS")
        # The worst result of the domain's mailboxes (another selector may fail).
        order = ("PASS", "WARN", "FAIL")
        if m["domain"] not in out or order.index(verdict[:4]) > order.index(out[m["domain"]][:4]):
            out[m["domain"]] = verdict
    return out


def approval_collect_task(run_id: str, campaign: str | None = None) -> dict[str, Any]:
    """Pick the campaign this run's Required Action is for and gather what approving it does
    (:func:`outreach.approval.gather`): ``campaign`` (the trigger form's Param), else the oldest
    campaign awaiting approval whose latest submission no Required Action listed yet (each
    submission is listed once: key ``approval:<submitted event id>`` in ``outreach.alerts``; a
    later run picks the next campaign).

    :returns: ``{"campaign", "content_version", "subject", "body"}`` (``body``: Markdown,
        :func:`outreach.approval.markdown`).
    :raises airflow.sdk.exceptions.AirflowSkipException: nothing awaits approval (or not
        ``campaign``).
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach import db
    from outreach.approval import awaiting, gather, markdown
    from outreach.store import alerts as alerts_store

    url = database_url()
    chosen = None
    for c in awaiting(url, campaign):
        if campaign:
            chosen = c
            break
        with db.transaction(url) as conn:
            if alerts_store.alert_claim_many(
                    conn, event_keys=[f"approval:{c['submitted_event_id']}"],
                    kind="required_action", subject=f"Required Action {run_id}", body=""):
                chosen = c
                break
    if chosen is None:
        raise AirflowSkipException(
            f"campaign {campaign} is not awaiting approval" if campaign else
            "no campaign awaiting approval that a Required Action has not listed")
    facts = gather(url, chosen, settings(), preflight=approval_preflight)
    log.info("Required Action: approval of campaign %s (campaign content version %s): %s "
             "lead(s) to be contacted, skipped %s", chosen["key"], chosen["content_version"],
             facts["to_contact"], facts["skipped"])
    return {"campaign": chosen["key"], "content_version": chosen["content_version"],
            "subject": f"Launch campaign {chosen['key']}? {facts['to_contact']} lead(s)",
            "body": markdown(facts)}


def approval_record_task(collected: dict[str, Any], response: dict[str, Any], dag_id: str,
                         run_id: str) -> dict[str, Any]:
    """Apply the launch approval's answer (:func:`outreach.campaign_pause.change_status`):
    *approve* → active, by the Airflow user who answered, at the time they answered, only if
    the content version is still the one shown; *reject* → draft with the reason they typed.

    :param collected: :func:`approval_collect_task`'s result.
    :param response: the HITL task's result: ``chosen_options``, ``params_input`` (``reason``),
        ``responded_by_user`` (``{"id", "name"}``, from Airflow's login), ``responded_at``.
    :raises airflow.sdk.exceptions.AirflowFailException: no user or no option in the answer,
        or the campaign changed meanwhile (:class:`outreach.campaign_pause.CampaignStateError`:
        its content changed since it was shown: the new submission gets its own Required
        Action).
    """
    import datetime as dt

    from airflow.sdk.exceptions import AirflowFailException

    from outreach.campaign_pause import CampaignStateError, change_status

    chosen = (response or {}).get("chosen_options") or []
    user = (response or {}).get("responded_by_user") or {}
    if len(chosen) != 1 or chosen[0] not in (APPROVE, REJECT) or not user.get("name"):
        raise AirflowFailException(f"the Required Action's answer is unusable: options {chosen}, "
                                   f"user {user.get('name')!r}")
    at = response.get("responded_at")
    if isinstance(at, str):
        at = dt.datetime.fromisoformat(at)
    typed = " ".join(str(((response.get("params_input") or {}).get("reason")) or "").split())
    where = f"Required Action {dag_id}/{run_id} (Airflow user id {user.get('id')})"
    try:
        if chosen[0] == APPROVE:
            change = change_status(database_url(), collected["campaign"], "approve", user["name"],
                                   typed or f"approved in {where}", now=at,
                                   content_version=collected["content_version"])
        else:
            change = change_status(database_url(), collected["campaign"], "reject", user["name"],
                                   typed or f"rejected in {where} (no reason typed)", now=at)
    except CampaignStateError as exc:
        raise AirflowFailException(str(exc)) from exc
    return {"campaign": change.campaign, "changed": change.changed, "status": change.status,
            "by": user["name"]}


def sql_export_target(conn_id: str, name: str) -> Any:
    """The warehouse tables behind Airflow SQL connection ``conn_id`` as an export target
    (:class:`outreach.export.SqlTarget`, cursor ``name``), through the connection's common-sql
    hook (its driver and placeholder).

    :raises outreach.settings.SettingsError: the connection does not exist, or its type's hook
        is not a common-sql ``DbApiHook``.
    """
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    from outreach.airflow.connections import _connection
    from outreach.export import SqlTarget
    from outreach.settings import SettingsError

    conn = _connection(conn_id)
    if conn is None:
        raise SettingsError(f"export connection {conn_id!r} does not exist (airflow connections add)")
    hook = conn.get_hook()
    if not isinstance(hook, DbApiHook):
        raise SettingsError(f"export connection {conn_id!r}: its hook "
                            f"{type(hook).__name__} is not a SQL (common-sql DbApiHook) hook")
    return SqlTarget(name, hook.get_conn, getattr(hook, "placeholder", "%s"))


def file_export_target(path: str, name: str, conn_id: str | None = None) -> Any:
    """The folder ``path`` (an ``ObjectStoragePath`` URL, read with connection ``conn_id``) as an
    export target of JSON-lines files (:class:`outreach.export.FileTarget`, cursor ``name``)."""
    from airflow.sdk import ObjectStoragePath

    from outreach.export import FileTarget

    root = ObjectStoragePath(path.rstrip("/") + "/", conn_id=conn_id)
    root.mkdir(parents=True, exist_ok=True)
    return FileTarget(name, root)


def export_task(kind: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export the new events to the ``kind`` target (``"sql"`` or ``"files"``), configured by
    ``params`` (the DAG's: ``conn_id``, ``path``, ``batch_size``; ``None`` values fall back to
    :class:`outreach.settings.ExportSettings`); return the counts. See :func:`outreach.export.export`.

    :raises airflow.sdk.exceptions.AirflowSkipException: that target is not configured.
    :raises outreach.settings.SettingsError: a setting is out of range, the connection is missing.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach.export import export
    from outreach.settings import ExportSettings

    p = {k: v for k, v in (params or {}).items() if v not in (None, "")}
    s = ExportSettings()
    if kind == "sql":
        conn_id = p.get("conn_id", s.export_conn_id)
        if not conn_id:
            raise AirflowSkipException("no SQL target: OUTREACH_EXPORT_CONN_ID is not set")
        target = sql_export_target(conn_id, s.export_sql_target)
    else:
        path = p.get("path", s.export_path)
        if not path:
            raise AirflowSkipException("no file target: OUTREACH_EXPORT_PATH is not set")
        target = file_export_target(path, s.export_files_target, s.export_path_conn_id)
    batch = ExportSettings(export_batch_size=p["batch_size"]).export_batch_size \
        if "batch_size" in p else s.export_batch_size
    result = export(database_url(), target, batch=batch)  # logs its line
    return {"target": result.target, "batches": result.batches, "events": result.events,
            "resumed": result.resumed}


def notify_replies_task() -> dict[str, int]:
    """Notify the new replies (:func:`outreach.notify.notify_replies`) through the alert notifier
    (:func:`outreach.airflow.alerts.deliver_alert`), reading their first lines from the mailboxes
    by their IMAP connections; return ``{"replies", "messages"}``.

    :raises airflow.sdk.exceptions.AirflowSkipException: no notifier is configured
        (``OUTREACH_ALERT_TO`` / ``OUTREACH_ALERT_NOTIFIER``); the cursor is left as it was.
    :raises outreach.settings.SettingsError: a notify setting is out of range, or the
        notifier cannot be built.
    :raises Exception: the notifier failed; the batch is delivered again by the retry.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    from outreach.airflow.alerts import alert_notifier, deliver_alert
    from outreach.notify import notify_replies
    from outreach.settings import NotifySettings

    config = NotifySettings()
    if alert_notifier() is None:
        raise AirflowSkipException("no notifier: set OUTREACH_ALERT_TO (SMTP) or "
                                   "OUTREACH_ALERT_NOTIFIER (e.g. Slack's); replies wait")
    result = notify_replies(database_url(), deliver_alert, imap_account, config)
    log.info("reply notifications: %s repl(ies) in %s message(s)", result.replies, result.messages)
    return {"replies": result.replies, "messages": result.messages}
