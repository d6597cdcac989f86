"""Airflow fan-out: the wall time of one ``outreach_send`` run of N planned batches (``airflow
dags test``, SQLite metadata, as :mod:`outreach.dev.localairflow` runs it), sized as ``make
airflow`` sizes one worker (``send_batch`` tasks running a worker's send slots of sessions at
once: :func:`outreach.sizing.sessions_per_task`), against the same plan run by the CLI (``outreach
send``: the same batches, one after the other, in one process). Both start from a clone of the
same queued database, with the same settings and SMTP server; both times include interpreter
start-up. Target (issue 29): Airflow ≤ 1.5× the CLI. The same run in a warm Airflow process (a
:class:`~outreach.dev.localairflow.DagTestSession` after one untimed run: Airflow imported and the
execution API built, as in a deployment's long-running processes) is measured too, to tell the
run's own cost from the process's start-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench_send import SinkProcess
from common import Row, Server, Stopwatch, median_of, run
from data import queued_database, smtp_conn_ids
from outreach import db
from outreach.dev.localairflow import DagTestSession, airflow_env, ensure_metadata, run_dag
from outreach.sizing import sessions_per_task


def bench(server: Server, workdir: Path, *, tasks: int, batch: int, repeats: int,
          ) -> tuple[list[Row], list[str]]:
    """Send ``tasks × batch`` queued emails both ways; return the result row and details.

    :raises RuntimeError: a run failed or did not send every email exactly once.
    """
    emails, mailboxes = tasks * batch, 2
    queued_database(server, "fanout_tpl", workdir, emails, mailboxes)
    details: list[str] = []
    with SinkProcess() as sink:
        settings = {"OUTREACH_PUBLIC_URL": "https://unsubscribe.bench.example",
                    "OUTREACH_UNSUBSCRIBE_SECRET": "bench-secret-0123456789",
                    "OUTREACH_SEND_INTERVAL_MINUTES": "0", "OUTREACH_SEND_GAP_SECONDS": "0",
                    "OUTREACH_PREFLIGHT": "off",
                    "OUTREACH_SEND_PARALLELISM": str(tasks), "OUTREACH_BATCH_SIZE": str(batch),
                    # The sizing rule's shape for one worker (make airflow): a worker's send
                    # slots of sessions in one send task (outreach.sizing.sessions_per_task).
                    "OUTREACH_SEND_SESSIONS_PER_TASK": str(sessions_per_task(tasks))}
        conns = {c: sink.connection_json() for c in smtp_conn_ids(mailboxes)}
        env = airflow_env(workdir / "airflow-home", "unset", conns, settings)
        with Stopwatch() as setup:
            ensure_metadata(env)
        details.append(f"fan-out: Airflow metadata migrated in {setup.seconds:.1f} s (not timed)")

        def once(kind: str) -> float:
            url = server.create("fanout_run", template="fanout_tpl")
            env["OUTREACH_DATABASE_URL"] = url
            with Stopwatch() as t:
                if kind == "airflow":
                    result = run_dag(env, "outreach_send", workdir / "fanout-airflow.log")
                    ok, what = result.ok, f"state {result.state}, log {result.log}"
                elif kind == "warm":
                    result = warm.run_dag("outreach_send", workdir / "fanout-warm.log", env=dict(env))
                    ok, what = result.ok, f"state {result.state}, log {result.log}"
                else:
                    cli = Path(sys.executable).with_name("outreach")
                    proc = subprocess.run([str(cli), "send"], env=env, capture_output=True,
                                          text=True, timeout=900)
                    ok, what = proc.returncode == 0, proc.stderr[-2000:]
            with db.connect(url) as conn:
                sent, ledger, duplicated = run(conn, "bench_sent_totals")[0].values()
            if not ok or (sent, ledger, duplicated) != (emails, emails, 0):
                raise RuntimeError(f"fan-out {kind}: ok={ok} sent={sent} ledger={ledger} "
                                   f"duplicated={duplicated} (expected {emails}): {what}")
            server.drop("fanout_run")
            details.append(f"fan-out {kind}: {t.seconds:.1f} s for {emails} emails")
            return t.seconds

        t_airflow, _ = median_of(repeats, lambda: once("airflow"))
        t_cli, _ = median_of(repeats, lambda: once("cli"))
        with DagTestSession(env) as warm:
            once("warm")  # untimed: imports, the execution API, the DAG parsed
            details[-1] = details[-1].replace("fan-out warm:", "fan-out warm-up (not timed):")
            t_warm, _ = median_of(repeats, lambda: once("warm"))
    os.environ.pop("OUTREACH_DATABASE_URL", None)
    ratio = t_airflow / t_cli
    return [Row(f"Airflow fan-out ({tasks} batches)",
                f"`outreach_send` run {t_airflow:.1f} s for {emails} emails ({tasks} × {batch})",
                f"CLI, same batches in one process {t_cli:.1f} s → Airflow "
                f"**{ratio:.1f}×** the time; the same run in a warm Airflow process "
                f"{t_warm:.1f} s ({t_warm / t_cli:.1f}×)", "≤ 1.5× the CLI (issue 29)", ratio <= 1.5,
                f"Airflow took {t_airflow - t_cli:.1f} s more than the CLI for the same sends, and "
                f"the same run in a warm Airflow process {t_warm:.1f} s: {t_airflow - t_warm:.1f} s "
                "of the cold run is its process's start-up (the interpreter and Airflow's imports, "
                "the in-process execution API built, the first task's start), not the run. A "
                "deployment does not start Airflow per run but pays a task process per task and "
                "the scheduler's round trips instead (the scale-out rows' details). Both Airflow "
                f"runs go plan (preflight off here), {-(-tasks // sessions_per_task(tasks))} send "
                f"task(s) of {sessions_per_task(tasks)} sessions at once (the sizing rule for one "
                "worker), summary and after_send one after the other, each with its own API round trips "
                "and XCom; the CLI sends its batches one after the other. The logs "
                "(fanout-airflow.log, fanout-warm.log in the work folder) time each step")], details
