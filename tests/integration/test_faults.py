"""Never twice under faults: each SMTP fault class, the retry clock, the reaper, operator
resolution, a database restart mid-batch. Real PostgreSQL, a real (fault-injecting) SMTP server."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import json
import threading

import psycopg
import pytest

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.dev.devsmtp import LoopbackSMTPServer, free_port
from outreach.leads import import_leads
from outreach.queue import Reaped, queue_due, reap
from outreach.resolve import resolve
from outreach.send import MailboxUnreachable, raise_if_unreachable, send_batch
from support import clifork, invariants
from support.faultsmtp import FaultSMTPServer
from support.flow import hand_over, leads_csv, point_mailboxes_at, rows, scalar
from support.paths import CAMPAIGN, MAILBOXES

T0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
MIN = dt.timedelta(minutes=1)


def send_round(url, settings, now) -> list:
    """One send run at clock ``now``: one batch per mailbox."""
    return [send_batch(url, mb, 100, smtp_connector, settings, worker="faults", now=now) for mb in (1, 2)]


def state(url: str) -> dict[str, dict]:
    return {r["email"]: r for r in rows(url, """
        SELECT l.email, e.id, e.status::text AS status, e.failure_kind, e.attempts, e.last_error,
               e.scheduled_for FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id""")}


def test_each_smtp_fault_class_lands_in_the_right_state(db_url, settings, tmp_path, monkeypatch, caplog):
    rules = {
        "ok@faults.example": ["accept"],
        "greylist@faults.example": ["rcpt_451", "accept"],
        "full@faults.example": ["rcpt_452"],
        "closing@faults.example": ["rcpt_421", "accept"],
        "nouser@faults.example": ["rcpt_550"],
        "spam@faults.example": ["data_554"],
        "later@faults.example": ["data_451", "accept"],
        "dropped@faults.example": ["drop"],
        "slow@faults.example": ["slow"],
    }
    settings = settings.replace(smtp_timeout=1)  # every reply within 1 s, or no reply
    with FaultSMTPServer(rules, slow_seconds=2.5) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=1))
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, list(rules)), now=T0)
        assert queue_due(db_url, now=T0)["queued"] == len(rules)

        send_round(db_url, settings, T0)
        s = state(db_url)
        assert s["ok@faults.example"]["status"] == "sent"
        for a in ("greylist", "full", "closing", "later"):
            row = s[f"{a}@faults.example"]
            assert (row["status"], row["attempts"]) == ("queued", 1), a
            assert row["scheduled_for"] == T0 + 30 * MIN, a
        assert "RCPT 451" in s["greylist@faults.example"]["last_error"]
        assert "END_OF_DATA 451" in s["later@faults.example"]["last_error"]
        nouser = s["nouser@faults.example"]
        assert (nouser["status"], nouser["failure_kind"]) == ("failed", "permanent")
        assert "RCPT 550 5.1.1" in s["nouser@faults.example"]["last_error"]
        # The reply quoted the address; what is stored (and logged) masks it.
        assert "<n***@faults.example>" in s["nouser@faults.example"]["last_error"]
        assert "nouser@" not in s["nouser@faults.example"]["last_error"]
        assert (s["spam@faults.example"]["failure_kind"], s["spam@faults.example"]["attempts"]) == ("sender_refused", 1)
        for a in ("dropped", "slow"):
            row = s[f"{a}@faults.example"]
            assert (row["status"], row["failure_kind"], row["attempts"]) == ("failed", "unconfirmed", 1), a
            assert "check Sent Items" in row["last_error"]
        # A 5.1.x "no such user" suppresses the address; a 5.7.1 spam rejection does not (its
        # reason is the sender's, and it fails as sender_refused: outreach.bounces).
        supp = {r["value"]: r["reason"] for r in rows(db_url, "SELECT value, reason FROM outreach.suppressions")}
        assert supp == {"nouser@faults.example": "bounced"}
        # ... and its log line says so (issue 12.6d), with the address masked.
        [bounce] = [r.getMessage() for r in caplog.records if "failed permanently" in r.getMessage()
                    and "RCPT 550" in r.getMessage()]
        assert "suppressed n***@faults.example (bounced: userunknown (5.1.1))" in bounce
        assert "nouser@" not in bounce

        # A retry is never claimed before 30 minutes have passed.
        assert sum(b.claimed for b in send_round(db_url, settings, T0 + 29 * MIN)) == 0
        send_round(db_url, settings, T0 + 31 * MIN)
        s = state(db_url)
        for a in ("greylist", "closing", "later"):
            assert (s[f"{a}@faults.example"]["status"], s[f"{a}@faults.example"]["attempts"]) == ("sent", 2), a
        assert (s["full@faults.example"]["status"], s["full@faults.example"]["attempts"]) == ("queued", 2)

        send_round(db_url, settings, T0 + 62 * MIN)
        s = state(db_url)
        full = s["full@faults.example"]
        assert (full["status"], full["failure_kind"], full["attempts"]) == ("failed", "retries_exhausted", 3)
        assert "RCPT 452" in full["last_error"]

        # Nothing is ever retried again: unconfirmed and failed rows stay as they are.
        assert sum(b.claimed for b in send_round(db_url, settings, T0 + 24 * 60 * MIN)) == 0
        assert smtp.attempts["dropped@faults.example"] == 1 and smtp.attempts["slow@faults.example"] == 1
        assert smtp.attempts["full@faults.example"] == 3
        totals = invariants.assert_ok(db_url, smtp.messages())
        assert totals.unconfirmed == 2 and totals.sent_rows == 4


def test_a_refused_connection_releases_the_batch_and_fails_the_mailbox_never_burning_attempts(
        db_url, settings, tmp_path, monkeypatch):
    """Issue 12.6b: a relay that refused connections burned one attempt of every claimed row per
    run (after three runs every row was failed/retries_exhausted) while the command exited 0."""
    closed = json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": free_port(),
                         "extra": {"disable_ssl": True, "disable_tls": True, "timeout": 1, "retry_limit": 0}})
    point_mailboxes_at(monkeypatch, closed)
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"p{i}@faults.example" for i in range(6)]), now=T0)
    queue_due(db_url, now=T0)
    for run in range(4):  # four runs, 31 minutes apart: more than the 3 attempts allowed
        summaries = send_round(db_url, settings, T0 + run * 31 * MIN)
        assert sum(b.released for b in summaries) == 6 and sum(b.retried + b.failed for b in summaries) == 0
        assert {(r["status"], r["attempts"]) for r in state(db_url).values()} == {("queued", 0)}
        with pytest.raises(MailboxUnreachable) as exc:
            raise_if_unreachable(summaries)
        assert {f["conn_id"] for f in exc.value.failures} == {"outreach_smtp_anna", "outreach_smtp_ben"}
        assert "\n" not in str(exc.value) and "Errno 111" in str(exc.value), exc.value
        assert "'outreach_smtp_anna' failed at CONNECT: ConnectionRefusedError" in str(exc.value)
    assert all(r["last_error"].startswith("CONNECT") for r in state(db_url).values())


def test_reaper_racing_a_finishing_sender_never_overwrites_a_sent_row(db_url, settings, tmp_path):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"r{i}@faults.example" for i in range(40)]), now=T0)
    queue_due(db_url, now=T0)
    from outreach.claim import claim

    for iteration in range(15):
        with psycopg.connect(db_url, autocommit=True) as c:  # a fresh round: every row queued again
            c.execute("DELETE FROM outreach.send_log")
            c.execute("UPDATE outreach.emails SET status = 'queued', failure_kind = NULL, sent_at = NULL,"
                      " handed_over_at = NULL, scheduled_for = %s", (T0,))
        conn = db.connect(db_url, autocommit=True)
        # Claimed at T0; at T0 + 31 minutes the reaper may take them while the sender finishes.
        claimed = claim(conn, 1, 100, worker="slow-sender", now=T0)[0]
        claimed += claim(conn, 2, 100, worker="slow-sender", now=T0)[0]
        assert len(claimed) == 40
        hand_over(db_url, claimed, now=T0)  # every row on its way to the server
        barrier = threading.Barrier(2)
        reaped: list[int] = []

        errors: list[BaseException] = []

        def sender(barrier=barrier, claimed=claimed, iteration=iteration, errors=errors) -> None:
            c2 = db.connect(db_url, autocommit=True)
            barrier.wait()
            try:
                for r in claimed:
                    db.run(c2, "email_mark_sent", {"email_id": r["id"], "claim_token": r["claim_token"],
                                                   "message_id": f"m{iteration}-{r['id']}@x",
                                                   "smtp_reply": "250", "now": None,
                                                   "subject": None, "content_version": None})
            except BaseException as exc:  # noqa: BLE001 - a guarded transition never raises
                errors.append(exc)
            finally:
                c2.close()

        def reaper(barrier=barrier, reaped=reaped) -> None:
            barrier.wait()
            reaped.extend(reap(db_url, dt.timedelta(minutes=30), now=T0 + 31 * MIN).unconfirmed)

        threads = [threading.Thread(target=sender), threading.Thread(target=reaper)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        conn.close()
        assert not errors, errors
        final = rows(db_url, "SELECT e.id, e.status::text AS status, e.failure_kind,"
                             " (SELECT count(*) FROM outreach.send_log s WHERE s.email_id = e.id) AS logs"
                             " FROM outreach.emails e")
        for r in final:
            assert (r["status"], r["failure_kind"], r["logs"]) in {("sent", None, 1), ("failed", "unconfirmed", 0)}, r
        assert sum(r["failure_kind"] == "unconfirmed" for r in final) == len(reaped)
        # Clear the unconfirmed rows for the next round through the only allowed door.
        if reaped:
            resolve(db_url, "not_sent", "test", ids=reaped)


def test_unconfirmed_rows_move_only_by_operator_resolution(db_url, sink, settings, tmp_path):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, [f"u{i}@faults.example" for i in range(4)]), now=T0)
    queue_due(db_url, now=T0)
    from outreach.claim import claim

    conn = db.connect(db_url, autocommit=True)
    held = claim(conn, 1, 10, worker="killed", now=T0)[0] + claim(conn, 2, 10, worker="killed", now=T0)[0]
    conn.close()
    hand_over(db_url, held, now=T0)  # killed during the handoffs
    assert reap(db_url, dt.timedelta(minutes=30), now=T0 + 29 * MIN) == Reaped()
    ids = sorted(reap(db_url, dt.timedelta(minutes=30), now=T0 + 31 * MIN).unconfirmed)
    assert len(ids) == 4
    keys_before = {r["id"]: r["k"] for r in rows(db_url, "SELECT id, idempotency_key::text AS k FROM outreach.emails")}
    with psycopg.connect(db_url) as c:
        with pytest.raises(psycopg.errors.CheckViolation, match="only an operator resolution"):
            c.execute("UPDATE outreach.emails SET status = 'queued', failure_kind = NULL WHERE id = %s", (ids[0],))
    # The sender's own transitions cannot touch it either (they require status 'sending').
    assert send_round(db_url, settings, T0 + 40 * MIN)[0].claimed == 0

    with pytest.raises(ValueError, match="who decides"):
        resolve(db_url, "was_sent", " ", ids=ids[:1])
    sent = resolve(db_url, "was_sent", "Dana (ops)", ids=ids[:2], note="found in Sent Items")
    requeued = resolve(db_url, "not_sent", "Dana (ops)", ids=ids[2:] + [999999])
    assert sent.resolved == ids[:2] and requeued.resolved == ids[2:] and requeued.skipped == [999999]
    assert resolve(db_url, "not_sent", "Dana (ops)", ids=ids).resolved == []  # twice: nothing
    log = rows(db_url, "SELECT email_id, source, message_id FROM outreach.send_log ORDER BY email_id")
    assert [(r["email_id"], r["source"]) for r in log] == [(ids[0], "operator"), (ids[1], "operator")]
    assert log[0]["message_id"].startswith(keys_before[ids[0]] + "@")
    send_round(db_url, settings, T0 + 41 * MIN)
    messages = sink.messages()
    assert len(messages) == 2
    # The requeued rows went out with the same idempotency key, hence the same Message-ID.
    assert {m["Message-ID"].strip("<>").split("@")[0] for m in messages} == {keys_before[i] for i in ids[2:]}
    assert scalar(db_url, "SELECT count(*) FROM outreach.email_resolutions") == 4
    invariants.assert_ok(db_url, messages)


def test_operator_requeues_only_not_accepted_failures_and_each_is_sent_once(db_url, settings, tmp_path, monkeypatch):
    """Issue 12.6c: after a relay was down for an hour every due row was failed/retries_exhausted
    and nothing but SQL could put them back. `outreach requeue --failed-kind retries_exhausted`
    requeues those (recorded with who and why), never unconfirmed or permanent failures."""
    from support.flow import cli_env

    rules = {"full@faults.example": ["rcpt_452"] * 3 + ["accept"],
             "nouser@faults.example": ["rcpt_550"], "dropped@faults.example": ["drop"]}
    with FaultSMTPServer(rules) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=5))
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, list(rules)), now=T0)
        queue_due(db_url, now=T0)
        for run in range(3):
            send_round(db_url, settings, T0 + run * 31 * MIN)
        s = state(db_url)
        assert [(s[a]["status"], s[a]["failure_kind"]) for a in rules] == [
            ("failed", "retries_exhausted"), ("failed", "permanent"), ("failed", "unconfirmed")]
        ids = {a: r["id"] for a, r in s.items()}
        env = cli_env(db_url, smtp)
        asked = ",".join(str(i) for i in ids.values())
        p = clifork.run(("requeue", "--failed-kind", "retries_exhausted", "--ids", asked,
                        "--by", "Dana", "--reason", "mailbox emptied, ticket 4711"), env=env, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"requeued=1 [{ids['full@faults.example']}]" in p.stdout, p.stdout
        assert "failed/permanent" in p.stdout and "failed/unconfirmed" in p.stdout, p.stdout
        again = clifork.run(("requeue", "--failed-kind", "retries_exhausted", "--by", "Dana",
                            "--reason", "twice"), env=env, timeout=120)
        assert again.returncode == 0 and "requeued=0" in again.stdout, again.stdout + again.stderr
        refused = clifork.run(("requeue", "--failed-kind", "unconfirmed", "--by", "Dana",
                              "--reason", "x"), env=env, timeout=120)
        assert refused.returncode == 2  # argparse: only retries_exhausted may be requeued
        s = state(db_url)
        assert (s["full@faults.example"]["status"], s["full@faults.example"]["attempts"]) == ("queued", 0)
        assert (s["nouser@faults.example"]["failure_kind"], s["dropped@faults.example"]["failure_kind"]) == (
            "permanent", "unconfirmed")
        [rec] = rows(db_url, "SELECT email_id, failure_kind, attempts, requeued_by, reason, last_error"
                             " FROM outreach.email_requeues")
        assert (rec["failure_kind"], rec["attempts"], rec["requeued_by"], rec["reason"]) == (
            "retries_exhausted", 3, "Dana", "mailbox emptied, ticket 4711")
        assert "RCPT 452" in rec["last_error"]
        send_round(db_url, settings, dt.datetime.now(dt.UTC) + MIN)
        messages = smtp.messages()
    assert [m["X-RcptTo"] for m in messages].count("full@faults.example") == 1
    assert state(db_url)["full@faults.example"]["status"] == "sent"
    invariants.assert_ok(db_url, messages)


# ---------------------------------------------------------------------------------------------
# F6: an unparseable reply to the end of DATA is classified RETRY (smtplib code -1), so a message
#     the server may have accepted is sent again 30 minutes later
# ---------------------------------------------------------------------------------------------

class _GarbledAfterData:
    def __init__(self) -> None:
        self.accepted: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.compat32)
        msg["X-RcptTo"] = envelope.rcpt_tos[0]
        self.accepted.append(msg)
        return "Ok: queued as 4ZxK2b1qzz" if len(self.accepted) == 1 else "250 OK"


def test_unparseable_reply_after_end_of_data_is_not_retried(db_url, settings, tmp_path, monkeypatch):
    handler = _GarbledAfterData()
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with LoopbackSMTPServer(handler) as smtp:
        point_mailboxes_at(monkeypatch, smtp.connection_json(timeout=5))
        import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["g@ex.example,G,Garbled"]), now=t0)
        queue_due(db_url, now=t0)
        for now in (t0, t0 + dt.timedelta(minutes=31)):
            for mb in (1, 2):
                send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk", now=now)
    st = rows(db_url, "SELECT status::text AS s, failure_kind, last_error FROM outreach.emails")
    t = invariants.check(db_url, handler.accepted)
    assert not t.problems, (st, t.problems)
