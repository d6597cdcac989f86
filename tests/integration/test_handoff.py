"""The handoff is a fact in the database (issue 12.3, 12.4): only a row whose handoff was stamped
can become unconfirmed, and a late acceptance becomes evidence an operator can act on.
Real `outreach` processes, a real PostgreSQL, the fault-injecting SMTP server."""

from __future__ import annotations

import asyncio
import datetime as dt
import email
import email.policy
from collections import Counter

import pytest

from outreach.airflow.connections import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due, reap
from outreach.send import send_batch
from support import clifork, invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import cli_env, leads_csv, one_mailbox, point_mailboxes_at, rows
from support.paths import CAMPAIGN, MAILBOXES

LATER = dt.timedelta(minutes=31)


def queued(db_url: str, tmp_path, n: int, tag: str) -> list[str]:
    addresses = [f"{tag}{i}@handoff.example" for i in range(n)]
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, addresses))
    one_mailbox(db_url)
    assert queue_due(db_url)["queued"] == n
    return addresses


def by_address(db_url: str) -> dict[str, dict]:
    return {r["email"]: r for r in rows(db_url, """
        SELECT l.email, e.id, e.status::text AS status, e.failure_kind, e.attempts, e.handed_over_at
        FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id ORDER BY e.id""")}


@pytest.mark.parametrize("point", ["after_handoff_stamp", "before_body", "after_end_of_data"])
def test_sigkilled_sender_leaves_only_the_stamped_row_unconfirmed(db_url, tmp_path, point):
    """Issue 12.3: after a SIGKILL the reaper failed the whole claimed batch as unconfirmed.
    Killed during the 3rd handoff of a 10-row batch: rows 1–2 are sent, row 3 (stamped) may have
    gone out, rows 4–10 never reached the server — they go back to the queue with their attempt
    count unchanged, and the next run delivers each exactly once."""
    addresses = queued(db_url, tmp_path, 10, "k")
    with FaultSMTPServer() as smtp:
        env = cli_env(db_url, smtp)
        killed = clifork.run(("send", "--limit", "10"), timeout=120, env={**env, "OUTREACH_FAILPOINTS": f"{point}:3"})
        assert killed.returncode == -9, killed.stdout + killed.stderr
        before = by_address(db_url)
        assert [before[a]["status"] for a in addresses] == ["sent"] * 2 + ["sending"] * 8
        assert [before[a]["handed_over_at"] is not None for a in addresses] == [True] * 3 + [False] * 7

        reaped = reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + LATER)
        after = by_address(db_url)
        assert reaped.unconfirmed == [after[addresses[2]]["id"]]
        assert sorted(reaped.requeued) == sorted(after[a]["id"] for a in addresses[3:])
        assert after[addresses[2]]["failure_kind"] == "unconfirmed"
        assert [(after[a]["status"], after[a]["attempts"]) for a in addresses[3:]] == [("queued", 0)] * 7

        again = clifork.run(("send", "--until-empty", "--limit", "10"), env=env, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        messages = smtp.messages()
    at_sink = Counter(m["X-RcptTo"] for m in messages)
    assert all(at_sink[a] == 1 for a in addresses[:2] + addresses[3:]), at_sink
    # The stamped row reached the server only when the kill came after the end of DATA.
    assert at_sink[addresses[2]] == (1 if point == "after_end_of_data" else 0)
    totals = invariants.assert_ok(db_url, messages)
    assert (totals.sent_rows, totals.unconfirmed) == (9, 1)


def test_a_late_acceptance_is_recorded_as_evidence_and_resolved_in_one_step(db_url, settings, tmp_path, monkeypatch):
    """Issue 12.4: the server answered 250 after the reaper had failed the row as unconfirmed, and
    the sender only logged "mark sent skipped". The fault server holds its end-of-DATA reply while
    a reaper run (31 minutes later) takes the row; the 250 then becomes evidence on the row."""
    [address] = queued(db_url, tmp_path, 1, "late")

    def reaper_runs_while_the_reply_is_held(n: int) -> None:
        reap(db_url, dt.timedelta(minutes=30), now=dt.datetime.now(dt.UTC) + LATER)

    with FaultSMTPServer({address: ["hook"]}, on_message=reaper_runs_while_the_reply_is_held) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=30))
        summary = send_batch(db_url, 1, 10, smtp_connector, settings, worker="w")
        messages = smtp.messages()
    assert (summary.sent, summary.lost_claims) == (0, 1)
    [row] = rows(db_url, "SELECT id, status::text AS status, failure_kind, late_accepted_at, "
                         "late_accept_reply, late_accept_message_id FROM outreach.emails")
    assert (row["status"], row["failure_kind"]) == ("failed", "unconfirmed")  # a person decides
    assert row["late_accept_reply"] == "250 2.0.0 OK queued" and row["late_accepted_at"] is not None
    assert row["late_accept_message_id"] == messages[0]["Message-ID"].strip("<>")
    invariants.assert_ok(db_url, messages)

    env = cli_env(db_url, smtp)
    listed = clifork.run(("unconfirmed",), env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "EVIDENCE: accepted late at" in listed.stdout and "250 2.0.0 OK queued" in listed.stdout
    assert f"Message-ID <{row['late_accept_message_id']}>" in listed.stdout
    assert f"--ids {row['id']} --decision was-sent" in listed.stdout

    done = clifork.run(("resolve", "--ids", str(row["id"]), "--decision", "was-sent",
                       "--by", "Dana"), env=env, timeout=60)
    assert done.returncode == 0 and "resolved=1" in done.stdout, done.stdout + done.stderr
    [res] = rows(db_url, "SELECT r.decision, r.evidence, s.smtp_reply, s.accepted_at, s.message_id "
                         "FROM outreach.email_resolutions r JOIN outreach.send_log s USING (email_id)")
    assert res["decision"] == "was_sent" and "accepted late at" in res["evidence"]
    assert "250 2.0.0 OK queued" in res["smtp_reply"] and res["accepted_at"] == row["late_accepted_at"]
    assert res["message_id"] == row["late_accept_message_id"]
    totals = invariants.assert_ok(db_url, messages)
    assert (totals.sent_rows, totals.unconfirmed) == (1, 0)


def test_database_lost_mid_batch_is_one_error_line_naming_the_stage_and_the_released_ids(db_url, tmp_path):
    """Issue 12.6a: `outreach send` ended in a raw traceback when PostgreSQL went away. Every
    backend of the database is killed (pg_terminate_backend) while the server holds its reply to
    the 3rd message: the sender records that row after reconnecting, releases the rest, and says
    so in one `outreach: error:` line; nothing is left 'sending', nothing is sent twice."""
    import psycopg

    addresses = queued(db_url, tmp_path, 10, "lost")

    def kill_every_backend(n: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND pid <> pg_backend_pid()")

    with FaultSMTPServer(nth={3: "hook"}, on_message=kill_every_backend) as smtp:
        env = cli_env(db_url, smtp)
        proc = clifork.run(("send", "--limit", "10"), env=env, timeout=120)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("outreach: error:")]
        state = by_address(db_url)
        released = [state[a]["id"] for a in addresses[3:]]
        assert "database connection lost mid-batch at stage SEND" in line, line
        assert f"email {state[addresses[2]]['id']} recorded (sent)" in line, line
        assert f"released ids {released} back to the queue" in line, line
        assert [state[a]["status"] for a in addresses] == ["sent"] * 3 + ["queued"] * 7
        assert [state[a]["attempts"] for a in addresses[3:]] == [0] * 7
        again = clifork.run(("send", "--until-empty", "--limit", "10"), env=env, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        messages = smtp.messages()
    assert Counter(m["X-RcptTo"] for m in messages) == Counter(addresses)
    invariants.assert_ok(db_url, messages)


# ---------------------------------------------------------------------------------------------
# F4: a live sender slower than the reaper threshold (settings accepted as valid) still hands off
#     rows the reaper took; an operator who follows "check Sent Items" requeues it; it goes out twice
# ---------------------------------------------------------------------------------------------

class _SlowReplies:
    """Answers MAIL, RCPT and the end of DATA each after `delay` s (inside the client timeout)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.accepted: list[email.message.Message] = []

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        await asyncio.sleep(self.delay)
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        await asyncio.sleep(self.delay)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        await asyncio.sleep(self.delay)
        msg = email.message_from_bytes(envelope.content, policy=email.policy.compat32)
        msg["X-RcptTo"] = envelope.rcpt_tos[0]
        self.accepted.append(msg)
        return "250 2.0.0 OK queued"


def test_sender_never_hands_off_a_row_the_reaper_took_meanwhile(db_url, sink, settings, tmp_path):
    """The claim is taken, then (before the handoff) the reaper takes the rows back — never
    handed over, so straight back to the queue: the original sender must not send them; the next
    run sends each once."""
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"h{i}@ex.example,H,Heart" for i in range(5)]))
    one_mailbox(db_url)
    queue_due(db_url)
    taken: list[int] = []
    import outreach.handoff as handoff_mod  # where the sender's row step looks its thread up

    real_thread_of = handoff_mod.thread_of

    def stalled_sender(conn, row):
        # The sender stalls after its claim, before its first handoff (a GC pause, a slow DNS
        # lookup…): meanwhile the reaper takes the rows back to the queue.
        if not taken:
            later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=31)
            reaped = reap(db_url, settings.reaper_threshold, now=later)
            assert reaped.unconfirmed == []
            taken.extend(reaped.requeued)
        return real_thread_of(conn, row)

    handoff_mod.thread_of = stalled_sender
    try:
        first = send_batch(db_url, 1, 10, smtp_connector, settings, worker="slow")
    finally:
        handoff_mod.thread_of = real_thread_of
    assert len(taken) == 5 and first.claimed == 5
    assert (first.sent, first.lost_claims) == (0, 5) and sink.messages() == []
    second = send_batch(db_url, 1, 10, smtp_connector, settings, worker="next-run")
    assert second.sent == 5
    invariants.assert_ok(db_url, sink.messages())
