"""The send path against a realistic SMTP relay: emails per second with a per-command delay.

A real relay answers each command in 50–300 ms, so one SMTP session sends a few messages a
second whatever our CPU cost; throughput comes from parallel sessions. The sink
(:class:`bench_send.SinkProcess` with ``delay``) answers EHLO, MAIL, RCPT, the end of DATA and
QUIT each ``delay`` seconds late, so one message over an open session waits ``3 × delay``.

*Ours* is what one run of the send DAG does: :func:`outreach.queue.plan_batches` with
``parallelism`` P (``OUTREACH_SEND_PARALLELISM``) and ``batch_size`` B, then one process per
planned batch running :func:`outreach.send.send_planned` (what a mapped ``send`` task runs:
claim per mailbox, suppression re-check, render, DKIM-sign, handoff, ledger), all started before
the clock and released together. P = 1 is one mapped task. Compared with the concurrency limit
``P ÷ (3 × delay)``: what P sessions could deliver if nothing but the relay's replies took time.
"""

from __future__ import annotations

import smtplib
import statistics
import time
from pathlib import Path
from typing import Any

from bench_send import SELECTOR, SETTINGS, SinkProcess, dkim_key
from common import PROCESSES, Row, Server, run
from data import queued_database
from outreach import db

REPLIES_PER_MESSAGE = 3
"""Delayed replies one message waits for over an open session: MAIL, RCPT, end of DATA."""
_MP = PROCESSES


def _sender(url: str, quotas: list[list[int]], port: int, pem: bytes, barrier, out) -> None:
    """One mapped send task in its own process: wait for the others, send its planned batch."""
    from outreach.send import send_planned

    def connector(conn_id: str) -> smtplib.SMTP:
        return smtplib.SMTP("127.0.0.1", port, timeout=SETTINGS.smtp_timeout)

    try:
        barrier.wait(timeout=300)
        summary = send_planned(url, quotas, connector, SETTINGS, label="bench",
                               dkim_keys=lambda conn_id: pem)
        out.put((time.perf_counter(), sum(b.sent for b in summary.batches), ""))
    except BaseException as exc:  # noqa: BLE001 - reported, so the parent fails with the reason, never hangs
        barrier.abort()
        out.put((time.perf_counter(), 0, f"{type(exc).__name__}: {exc}"))


def measure(server: Server, sink: SinkProcess, parallelism: int, batch: int,
            pem: bytes) -> dict[str, Any]:
    """One run: clone the template, plan with ``parallelism``, send every batch at once.

    :returns: ``{"seconds", "sent", "rate" (emails/s), "batches"}``.
    :raises RuntimeError: a sender failed, or the server did not get each planned email once.
    """
    from outreach.queue import plan_batches

    url = server.create("latency_run", template="latency_tpl")
    plan = plan_batches(url, batch, parallelism=parallelism)
    planned = sum(b["limit"] for b in plan)
    barrier, out = _MP.Barrier(len(plan) + 1), _MP.Queue()
    procs = [_MP.Process(target=_sender, args=(url, b["quotas"], sink.port, pem, barrier, out))
             for b in plan]
    for p in procs:
        p.start()
    before = sink.count
    barrier.wait(timeout=300)
    start = time.perf_counter()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    errors = [e for *_, e in results if e]
    if errors:
        raise RuntimeError(f"send latency ×{parallelism}: {errors[0]}")
    seconds = max(end for end, _, _ in results) - start
    sent = sum(n for _, n, _ in results)
    with db.connect(url) as conn:
        total, ledger, duplicated = run(conn, "bench_sent_totals")[0].values()
    if not sent == total == ledger == planned == sink.count - before or duplicated:
        raise RuntimeError(f"send latency ×{parallelism}: planned {planned}, sent {sent}, "
                           f"rows sent {total}, ledger {ledger}, server got "
                           f"{sink.count - before}, duplicated {duplicated}")
    server.drop("latency_run")
    return {"seconds": seconds, "sent": sent, "rate": sent / seconds, "batches": len(plan)}


def bench(server: Server, workdir: Path, *, delay: float, parallelism: list[int], batch: int,
          mailboxes: int, repeats: int) -> tuple[list[Row], list[str]]:
    """Run the latency benchmark; return result rows and one detail line per run.

    :param delay: the sink's seconds per command (default 0.1).
    :param parallelism: ``OUTREACH_SEND_PARALLELISM`` values, e.g. ``[1, 4, 16]``.
    :param batch: ``OUTREACH_BATCH_SIZE``: rows one planned batch (mapped task) claims.
    :param mailboxes: sending mailboxes the queue is spread over (each batch opens one session
        per mailbox it claims from).
    """
    pem = dkim_key()
    queued_database(server, "latency_tpl", workdir, max(parallelism) * batch, mailboxes,
                    dkim_selector=SELECTOR)
    with db.connect(server.url("latency_tpl"), autocommit=True) as conn:
        run(conn, "bench_vacuum_analyze")
    per_message = REPLIES_PER_MESSAGE * delay
    rows: list[Row] = []
    details: list[str] = []
    with SinkProcess(delay=delay) as sink:
        for p in parallelism:
            runs = [measure(server, sink, p, batch, pem) for _ in range(max(1, repeats))]
            rate = statistics.median(r["rate"] for r in runs)
            sessions = runs[0]["batches"]
            limit = sessions / per_message
            details.append(f"send at {delay * 1000:.0f} ms a command ×{p}: "
                           + ", ".join(f"{r['rate']:,.1f} emails/s ({r['sent']} in "
                                       f"{r['seconds']:.1f} s, {r['batches']} batches)"
                                       for r in runs))
            label = "one mapped task" if p == 1 else f"OUTREACH_SEND_PARALLELISM={p}"
            rows.append(Row(
                f"send at {delay * 1000:.0f} ms a command ×{p}",
                f"{rate:,.1f} emails/s ({label}, batches of {batch} over {mailboxes} mailboxes)",
                f"concurrency limit {sessions} session(s) ÷ {per_message * 1000:.0f} ms a message "
                f"= {limit:,.1f}/s → ours **{rate / limit:.2f}×**",
                "reported (sizes the defaults: docs/explanation/pacing.md)", None))
    return rows, details
