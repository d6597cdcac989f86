"""The `outreach` command as a user runs it (a subprocess), against a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.flow import outreach
from support.paths import ROOT


def test_db_upgrade_twice_says_up_to_date(db_url):
    p = outreach(db_url, "db", "upgrade")
    assert p.returncode == 0 and "up to date" in p.stdout


def test_import_reports_bad_rows_by_line_and_keeps_the_good(db_url, tmp_path):
    csv = tmp_path / "crm-export.csv"
    csv.write_text("Email Address,First Name,Company Name\nok@acme.example,Ok,Acme\nbroken@,Bad,Acme\n"
                   "ok2@acme.example,Ok2,Acme\n")
    p = outreach(db_url, "import-leads", "--csv", str(csv))
    assert p.returncode == 0, p.stderr
    assert "imported=2" in p.stdout and "invalid=1" in p.stdout
    assert f"{csv}, line 3, field email: invalid address" in p.stdout


def test_unusable_files_fail_with_file_line_and_field(db_url, tmp_path):
    csv = tmp_path / "no-email.csv"
    csv.write_text("Name,Company\nAna,Acme\n")
    p = outreach(db_url, "import-leads", "--csv", str(csv))
    assert p.returncode == 1 and f"{csv}, line 1: no email column" in p.stderr
    bad = tmp_path / "bad.yaml"
    demo = (ROOT / "include/campaigns/demo.yaml").read_text()
    line = next(n for n, text in enumerate(demo.splitlines(), 1) if "delay_days: 3" in text)
    bad.write_text(demo.replace("delay_days: 3", "delay_days: -3"))
    p = outreach(db_url, "import-leads", "--campaign", str(bad), "--csv", str(csv))
    assert p.returncode == 1
    assert (f"{bad}, line {line}, field steps.1.delay_days: Input should be greater than or "
            f"equal to 0") in p.stderr
    assert "Traceback" not in p.stderr


def test_report_text_and_json_after_a_send(db_url, sink, tmp_path):
    conn = sink.connection_json()
    env = {"AIRFLOW_CONN_OUTREACH_SMTP_ANNA": conn, "AIRFLOW_CONN_OUTREACH_SMTP_BEN": conn}
    assert outreach(db_url, "import-leads", "--csv", "include/data/sample_leads.csv", "--suppressions",
                    "include/data/do_not_contact.csv").returncode == 0
    assert "queued 196" in outreach(db_url, "queue-due").stdout
    p = outreach(db_url, "send", "--limit", "30", **env)
    assert p.returncode == 0, p.stderr
    import re

    sent = [int(n) for n in re.findall(r" sent=(\d+)", p.stdout)]
    assert sent and sum(sent) == len(sink.messages()) < 196  # one run: batches of at most 30
    text = outreach(db_url, "report").stdout
    assert "q4-ops-intro" in text and "sent today" in text and "a***@mail.outreach-demo.example" in text
    report = json.loads(outreach(db_url, "report", "--json").stdout)
    by_mailbox = {r["mailbox_id"]: r for r in report["rows"]}
    assert by_mailbox[1]["sent"] + by_mailbox[1]["queued"] == 98
    assert by_mailbox[1]["sent"] + by_mailbox[2]["sent"] == sum(sent)
    assert sorted(m["used_today"] for m in report["mailboxes"]) == sorted(r["sent"] for r in report["rows"])
    assert report["totals"]["send_log"] == sum(sent)
    assert "anna.schmidt@" not in json.dumps(report)


LAUNCHER = ("from outreach.dev import embedded; embedded.local_database_url(); "
            "print('stops at exit:', embedded.stops_at_exit())")
"""What a local launcher does about the database (outreach.dev.deploy, outreach demo)."""


def test_db_stop_stops_the_embedded_server_whoever_runs_it(tmp_path):
    """`outreach db stop` stops the embedded PostgreSQL that a plain command left running; run
    as root (as CI does), the server belongs to pgserver's own user, which `pg_ctl stop` by root
    cannot stop. A second stop says nothing was running."""
    import psutil

    state = tmp_path / "state"
    env = dict(os.environ, OUTREACH_HOME=str(ROOT), OUTREACH_STATE_DIR=str(state),
               AIRFLOW_HOME=str(tmp_path / "airflow-home"), OUTREACH_EMBEDDED_DB="1")
    env.pop("OUTREACH_DATABASE_URL", None)
    env.pop("AIRFLOW_CONN_OUTREACH_DB", None)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "outreach.cli", *args], env=env,
                              capture_output=True, text=True, timeout=300)

    pgdata = (state / "pgdata").resolve()
    assert run("db", "stop").stdout.strip() == \
        f"nothing was running: no embedded PostgreSQL server in {pgdata}"
    # A database nobody upgraded yet: one line that says what to run, not a traceback.
    empty = run("report")
    assert empty.returncode == 1 and "Traceback" not in empty.stderr, empty.stderr
    assert empty.stderr.strip().endswith("run `outreach db upgrade` first"), empty.stderr
    started = run("db", "upgrade")
    assert started.returncode == 0, started.stderr
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    server = psutil.Process(pid)
    try:
        assert server.is_running()  # the command left it running for the next one
        # The embedded server's own log lines stay off stdout: --json output is JSON alone.
        report = run("report", "--json")
        assert report.returncode == 0, report.stderr
        json.loads(report.stdout)
        # A local launcher (make airflow, outreach demo) that found it running leaves it running
        # when it exits: it stops only a server it started.
        launcher = subprocess.run([sys.executable, "-c", LAUNCHER], env=env, capture_output=True,
                                  text=True, timeout=300)
        assert launcher.returncode == 0, launcher.stderr
        assert "stops at exit: False" in launcher.stdout  # what `make airflow` says when stopped
        assert server.is_running() and (pgdata / "postmaster.pid").exists()
        stopped = run("db", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == f"stopped the embedded PostgreSQL server in {pgdata} (pid {pid})"
        assert not (pgdata / "postmaster.pid").exists()
        server.wait(timeout=30)  # pg_ctl -w returns once the pid file is gone; the exit follows
        again = run("db", "stop")
        assert again.returncode == 0 and again.stdout.startswith("nothing was running")
        # One it started itself, it stops at its exit.
        launcher = subprocess.run([sys.executable, "-c", LAUNCHER], env=env, capture_output=True,
                                  text=True, timeout=300)
        assert launcher.returncode == 0 and "stops at exit: True" in launcher.stdout, launcher.stderr
        assert not (pgdata / "postmaster.pid").exists(), launcher.stderr
    finally:
        if server.is_running():  # the test failed: leave no server behind
            server.terminate()


def test_reap_and_the_queue_task_need_no_unsubscribe_secret(db_url, tmp_path, monkeypatch):
    """Taking stale 'sending' rows back uses only the reaper's threshold: `outreach reap` after
    the demo (no secret in the shell) and the queue DAG's task of a deployment that sends only
    transactional mail run without OUTREACH_PUBLIC_URL or an unsubscribe secret."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OUTREACH_PUBLIC_URL", "OUTREACH_UNSUBSCRIBE_SECRET")}
    env.update(OUTREACH_DATABASE_URL=db_url, OUTREACH_HOME=str(ROOT),
               AIRFLOW_HOME=str(tmp_path / "airflow-home"))
    p = subprocess.run([sys.executable, "-m", "outreach.cli", "reap"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "marked 0 email(s) unconfirmed" in p.stdout and "put 0 email(s) back" in p.stdout

    from outreach.airflow.tasks_send import queue_task

    for name in ("OUTREACH_PUBLIC_URL", "OUTREACH_UNSUBSCRIBE_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    result = queue_task()
    assert result["queued"] == 0 and result["reaped"] == 0 and result["reaped_requeued"] == 0


def test_send_says_what_the_contact_policy_held_back(db_url, sink, tmp_path):
    """The same leads in a second campaign on the day the first one reached them: `outreach
    send` sends nothing more and its lines say how many rows were held for later and why (the
    default contact policy, one email a person a day), adding up to every held row."""
    import re

    from support.flow import scalar

    conn = sink.connection_json()
    env = {"AIRFLOW_CONN_OUTREACH_SMTP_ANNA": conn, "AIRFLOW_CONN_OUTREACH_SMTP_BEN": conn}
    second = tmp_path / "second.yaml"
    second.write_text((ROOT / "include/campaigns/demo.yaml").read_text().replace(
        "key: q4-ops-intro", "key: q4-second"))
    for campaign in ("include/campaigns/demo.yaml", str(second)):
        assert outreach(db_url, "import-leads", "--campaign", campaign, "--csv",
                        "include/data/sample_leads.csv").returncode == 0
        assert outreach(db_url, "queue-due").returncode == 0
        p = outreach(db_url, "send", "--until-empty", **env)
        assert p.returncode == 0, p.stderr
        if campaign == str(second):
            break
        sent = len(sink.messages())
        assert sent > 0 and " held=" not in p.stdout, p.stdout
    assert len(sink.messages()) == sent  # everyone was reached today already
    held = [int(n) for n in re.findall(r"^batch mailbox=\d+ .* held=(\d+) note=\d+ held for "
                                       r"later: frequency cap: 1 a day \(\d+\)$", p.stdout, re.M)]
    waiting = scalar(db_url, "SELECT count(*) FROM outreach.emails e JOIN outreach.campaigns c"
                     " ON c.id = e.campaign_id WHERE c.key = 'q4-second' AND e.status = 'queued'"
                     " AND e.hold_reason = 'frequency cap: 1 a day'")
    assert held and sum(held) == waiting == sent, p.stdout


def test_inbox_without_its_connections_says_each_failure_once_a_stream(db_url, tmp_path):
    """`outreach inbox` with no IMAP connection set: per mailbox one FAILED line on stdout and
    one line on stderr saying what to set; the log's copy of the line only with -v."""
    assert outreach(db_url, "mailbox", "sync").returncode == 0
    p = outreach(db_url, "inbox")
    assert p.returncode == 1
    failed = [ln for ln in p.stdout.splitlines() if " FAILED no Airflow connection " in ln]
    errors = [ln for ln in p.stderr.splitlines() if "outreach_imap_" in ln]
    assert len(failed) == len(errors) == 3, p.stdout + p.stderr
    assert all(e.startswith("outreach: error: inbox ") and "AIRFLOW_CONN_OUTREACH_IMAP_" in e
               for e in errors), errors
    verbose = outreach(db_url, "-v", "inbox")
    both = verbose.stdout + verbose.stderr  # printed, and logged (Airflow's log format)
    assert both.count(" FAILED no Airflow connection ") == 6, both


def test_two_launchers_stop_the_embedded_server_when_the_last_one_exits(tmp_path):
    """Launcher A starts the embedded server, B reuses it; A exits first: the server stays for
    B, and B's exit stops it (the stop belongs to the server A started, not to A)."""
    state = tmp_path / "state"
    env = dict(os.environ, OUTREACH_HOME=str(ROOT), OUTREACH_STATE_DIR=str(state),
               AIRFLOW_HOME=str(tmp_path / "airflow-home"))
    env.pop("OUTREACH_DATABASE_URL", None)
    hold = LAUNCHER + "; import sys; print('up', flush=True); sys.stdin.readline()"

    def launch() -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", hold], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        assert line.startswith("stops at exit:"), line + p.stderr.read()
        assert p.stdout.readline() == "up\n"
        return p

    pgdata = (state / "pgdata").resolve()
    first = launch()
    second = None
    try:
        second = launch()
        first.communicate("\n", timeout=120)
        assert first.returncode == 0
        assert (pgdata / "postmaster.pid").exists()  # B still uses it
        second.communicate("\n", timeout=120)
        assert second.returncode == 0
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
        subprocess.run([sys.executable, "-m", "outreach.cli", "db", "stop"], env=env,
                       capture_output=True, timeout=120)


def test_send_runs_its_sessions_at_once_as_a_send_task_does(db_url, tmp_path):
    """`outreach send` with OUTREACH_SEND_SESSIONS_PER_TASK=4 and a pool of 3 slots (issue 29):
    the plan's four batches go out three at once, as a send task of the DAG would take them (4
    cut to divide the pool), counted at a real SMTP server on loopback answering each message a
    little late, as a relay does; every lead gets its email exactly once."""
    from support import invariants
    from support.celerydeploy import CountingSink
    from support.flow import EXPECTED_LEADS

    sink = CountingSink(tmp_path / "counted").start()
    try:
        sink.reset(delay=0.02)
        conn = sink.connection_json()
        env = {"AIRFLOW_CONN_OUTREACH_SMTP_ANNA": conn, "AIRFLOW_CONN_OUTREACH_SMTP_BEN": conn,
               "OUTREACH_SEND_PARALLELISM": "4", "OUTREACH_BATCH_SIZE": "25",
               "OUTREACH_SEND_SESSIONS_PER_TASK": "4", "OUTREACH_SMTP_POOL_SLOTS": "3"}
        assert outreach(db_url, "import-leads", "--csv", "include/data/sample_leads.csv",
                        "--suppressions", "include/data/do_not_contact.csv").returncode == 0
        assert f"queued {EXPECTED_LEADS}" in outreach(db_url, "queue-due").stdout
        p = outreach(db_url, "send", **env)
        assert p.returncode == 0, p.stderr
        assert sink.peak == 3, f"{sink.peak} session(s) at once, not the pool's 3"
        messages = sink.messages()
        totals = invariants.assert_ok(db_url, messages)
        assert len(messages) == totals.sent_rows == 100
    finally:
        sink.stop()
