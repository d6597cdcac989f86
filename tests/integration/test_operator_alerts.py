"""Operators see what needs them: alerts sent once (deduplicated in the database) through the SMTP
provider's notifier to a real SMTP sink, send tasks that fail instead of staying green, the
summary read from the ledger, and the resolve paths (the Params DAG's checks, the Required
Action's record step). Real PostgreSQL and aiosmtpd; the Airflow side runs in
tests/acceptance/test_deployment.py."""

from __future__ import annotations

import datetime as dt
import threading
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from outreach import db
from outreach.airflow import alerts as airflow_alerts
from outreach.airflow import tasks_import, tasks_send, tasks_unconfirmed
from outreach.alerts import list_alerts, raise_alert
from outreach.dev.devsmtp import MaildirServer
from outreach.queue import queue_due
from support.alerts import OPS, subject_of
from support.flow import import_demo, leave_unconfirmed, rows


@pytest.fixture
def alert_sink(tmp_path, monkeypatch, db_url):
    """A second real SMTP server for alerts; OUTREACH_ALERT_TO and the alert connection point at it."""
    server = MaildirServer(tmp_path / "alerts").start()
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_ALERTS", server.connection_json())
    monkeypatch.setenv("OUTREACH_ALERT_TO", OPS)
    monkeypatch.setenv("OUTREACH_ALERT_FROM", "outreach@outreach-test.example")
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", "https://unsubscribe.test.example")
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", "test-secret-0123456789")
    monkeypatch.setenv("OUTREACH_SEND_INTERVAL_MINUTES", "0")
    monkeypatch.setenv("OUTREACH_SEND_GAP_SECONDS", "0")
    yield server
    server.stop()


def body_of(message) -> str:
    """The alert's text (the HTML part the SMTP notifier sends, tags and escapes undone)."""
    import html
    import re

    part = next(p for p in message.walk() if p.get_content_type() == "text/html")
    return html.unescape(re.sub(r"<[^>]+>", "", part.get_payload(decode=True).decode()))



def test_an_event_is_alerted_once_however_many_race_for_it(db_url, alert_sink):
    import_demo(db_url)
    barrier = threading.Barrier(6)
    results = []

    def one() -> None:
        barrier.wait()
        results.append(raise_alert(db_url, "run_failed", "run-failed:outreach_send:r1",
                                   lambda keys: ("outreach: run r1 failed", "body of r1"),
                                   airflow_alerts.deliver_alert))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(len(r) for r in results) == [0, 0, 0, 0, 0, 1]
    messages = alert_sink.messages()
    assert [(m["To"], subject_of(m)) for m in messages] == [(OPS, "outreach: run r1 failed")]
    assert [a["event_key"] for a in list_alerts(db_url)] == ["run-failed:outreach_send:r1"]


def test_a_failed_delivery_is_tried_again_next_time(db_url, alert_sink):
    def broken(subject: str, body: str) -> None:
        raise ConnectionRefusedError("alert relay down")

    with pytest.raises(ConnectionRefusedError):
        raise_alert(db_url, "paused", "paused:7", lambda k: ("s", "b"), broken)
    assert list_alerts(db_url) == []  # rolled back: not recorded as sent
    assert raise_alert(db_url, "paused", "paused:7", lambda k: ("outreach: s", "b"),
                       airflow_alerts.deliver_alert) == ["paused:7"]
    assert raise_alert(db_url, "paused", "paused:7", lambda k: ("again", "b"),
                       airflow_alerts.deliver_alert) == []
    assert [subject_of(m) for m in alert_sink.messages()] == ["outreach: s"]


def test_new_unconfirmed_emails_are_alerted_once_and_flag_the_review(db_url, alert_sink):
    import_demo(db_url)
    queue_due(db_url)
    first = leave_unconfirmed(db_url, 2)
    assert tasks_unconfirmed.flag_unconfirmed_task() == {"new": first, "unlisted": first}
    # No Required Action listed them yet (the review DAG was paused, say): the next send run
    # updates the asset again, without a second alert.
    assert tasks_unconfirmed.flag_unconfirmed_task() == {"new": [], "unlisted": first}
    assert tasks_unconfirmed.review_collect_task("manual__r1")["ids"] == first
    # All listed: no alert, and nothing for after_send to update the asset with.
    assert tasks_unconfirmed.flag_unconfirmed_task() == {"new": [], "unlisted": []}
    second = leave_unconfirmed(db_url, 1)
    assert tasks_unconfirmed.flag_unconfirmed_task() == {"new": second, "unlisted": second}
    messages = sorted(alert_sink.messages(), key=lambda m: subject_of(m), reverse=True)
    assert [subject_of(m) for m in messages] == [
        "outreach: 2 new unconfirmed email(s): check Sent Items",
        "outreach: 1 new unconfirmed email(s): check Sent Items"]
    body = body_of(messages[0])
    assert f"email {first[0]}: q4-ops-intro step 1" in body and "anna — sales" in body
    assert "anna.schmidt@" not in body and "@" in body  # recipients masked


def test_an_alert_without_a_notifier_logs_one_line_not_sent(db_url, monkeypatch, caplog):
    monkeypatch.delenv("OUTREACH_ALERT_TO", raising=False)
    monkeypatch.delenv("OUTREACH_ALERT_NOTIFIER", raising=False)
    with caplog.at_level("INFO", logger="outreach"):
        assert raise_alert(db_url, "paused", "paused:8", lambda k: ("outreach: s", "b"),
                           airflow_alerts.deliver_alert) == ["paused:8"]
    said = [r.getMessage() for r in caplog.records if "alert" in r.getMessage()]
    assert said == ["alert recorded, not delivered (no notifier: set OUTREACH_ALERT_TO or "
                    "OUTREACH_ALERT_NOTIFIER): outreach: s"], said


def test_automatic_pause_and_bounce_warning_are_alerted_once(db_url, alert_sink):
    from outreach.mailboxes import pause

    import_demo(db_url)
    with db.transaction(db_url) as conn:
        pause(conn, 1, "hard-bounce rate 8 % (2 of 25 sends), above 3 %", "bounce-rate")
        pause(conn, 2, "complaints from a customer", "alice")  # an operator's pause: no alert
    assert len(airflow_alerts.alert_pauses(db_url)) == 1
    assert airflow_alerts.alert_pauses(db_url) == []
    [m] = alert_sink.messages()
    assert subject_of(m) == "outreach: mailbox anna — sales paused by bounce-rate"
    assert "hard-bounce rate 8 % (2 of 25 sends), above 3 %" in body_of(m)


def test_preflight_fail_is_alerted_once_a_day(db_url, alert_sink):
    report = {"mode": "block", "failed": {"mail.example.com": ["SPF", "DMARC"]}}
    airflow_alerts.alert_preflight(report)
    airflow_alerts.alert_preflight(report)
    [m] = alert_sink.messages()
    assert subject_of(m) == "outreach: DNS preflight FAIL for mail.example.com: SPF, DMARC"


def context_for(run_id: str, map_index: int = 0, try_number: int = 1) -> dict:
    ti = SimpleNamespace(dag_id="outreach_send", run_id=run_id, task_id="send_batch",
                         map_index=map_index, try_number=try_number)
    return {"ti": ti}


def test_send_task_fails_on_unconfirmed_rows_and_summary_reads_the_ledger(db_url, alert_sink, sink,
                                                                        monkeypatch, caplog):
    import_demo(db_url)
    queue_due(db_url)
    batches = tasks_send.plan_task({"blocked": []})
    assert batches[0]["label"].startswith("batch 1/")
    assert "anna — sales" in batches[0]["label"] and "@" not in batches[0]["label"]
    ctx = context_for("manual__r1")
    result = tasks_send.send_task(batches[0], ctx)
    assert ctx["batch_label"].startswith("anna — sales: sent ")
    assert "@" not in ctx["batch_label"]

    # A row of the next batch is left unconfirmed: the end of DATA got no answer.
    from outreach import transport
    from outreach.transport import Delivery, Outcome, Stage

    real = transport.SmtpSession.deliver
    calls = {"n": 0}

    def flaky(self, payload, mail_from, rcpt_to, on_body=None):
        calls["n"] += 1
        if calls["n"] == 2:
            if on_body:
                on_body()
            return Delivery(Outcome.AMBIGUOUS, Stage.END_OF_DATA, None, "timed out")
        return real(self, payload, mail_from, rcpt_to, on_body=on_body)

    monkeypatch.setattr(transport.SmtpSession, "deliver", flaky)
    ctx2 = context_for("manual__r1", map_index=1)
    with pytest.raises(AirflowFailException, match=r"1 email\(s\) unconfirmed \(ids \["):
        tasks_send.send_task(batches[1], ctx2)
    assert "unconfirmed 1" in ctx2["batch_label"]
    monkeypatch.setattr(transport.SmtpSession, "deliver", real)

    # The summary counts what the ledger says this run did, both tasks, and fails because a
    # send task failed (only one result for two planned batches).
    with pytest.raises(AirflowFailException, match="1 of 2 send task"):
        tasks_send.summary_task(batches[:2], [result], "outreach_send", "manual__r1")
    # A cleared try of the failed task claims fresh rows, counted with the same run.
    import re

    ctx3 = context_for("manual__r1", map_index=1, try_number=2)
    caplog.clear()
    with caplog.at_level("INFO", logger="outreach"):
        retry = tasks_send.send_task(batches[1], ctx3)
    # The label sums both tries of the task: the first try's unconfirmed one is still in it.
    tries = rows(db_url, "SELECT count(*) FILTER (WHERE status = 'sent') AS sent, "
                         "count(*) FILTER (WHERE failure_kind = 'unconfirmed') AS unconfirmed "
                         "FROM outreach.emails WHERE starts_with(claimed_by, %s)",
                 ("outreach_send/manual__r1/send_batch[1]#try",))[0]
    assert tries["sent"] > retry["sent"]  # the first try sent some too
    label = ctx3["batch_label"]
    assert sum(int(n) for n in re.findall(r"sent (\d+)", label)) == tries["sent"], label
    assert "unconfirmed 1" in label, label
    # One masked line per email handed over: id, step, mailbox, outcome.
    lines = [r.getMessage() for r in caplog.records if ": sent, 250" in r.getMessage()]
    assert len(lines) == retry["sent"] and all("@" in ln and "***@" in ln for ln in lines)
    assert all(", step 1, mailbox " in ln and "Message-ID <" in ln for ln in lines), lines[:2]
    out = tasks_send.summary_task(batches[:2], [result, retry], "outreach_send", "manual__r1")
    sent = rows(db_url, "SELECT count(*) AS n FROM outreach.emails WHERE status = 'sent'")[0]["n"]
    assert out["totals"]["sent"] == sent == len(sink.messages())
    assert out["totals"]["unconfirmed"] == 1
    claimed = rows(db_url, "SELECT count(*) AS n FROM outreach.emails WHERE starts_with(claimed_by, %s)",
                   ("outreach_send/manual__r1/",))[0]["n"]
    assert out["totals"]["claimed"] == claimed > result["claimed"] + retry["claimed"]
    # Another run's summary sees none of it.
    assert tasks_send.summary_task([], [], "outreach_send", "manual__r2")["totals"]["claimed"] == 0
    # Rows the send tasks' claims held back stay queued (no ledger trace): their own counts.
    caplog.clear()
    with caplog.at_level("INFO", logger="outreach"):
        out = tasks_send.summary_task([{}, {}], [{"held": 3}, {"held": 4}], "outreach_send", "manual__r3")
    assert out["held"] == 7 and " held=7 (queued for later" in caplog.text


def test_preflight_blocked_mailbox_gets_a_failing_batch(db_url, alert_sink, sink):
    import_demo(db_url)
    queue_due(db_url)
    checked = {"blocked": [{"mailbox_id": 1, "domain": "mail.outreach-demo.example",
                            "reason": "preflight FAIL: SPF"}]}
    batches = tasks_send.plan_task(checked)
    blocked = [b for b in batches if b.get("blocked")]
    assert [b["label"] for b in blocked] == ["anna — sales: blocked, preflight FAIL: SPF"]
    assert all(q[0] != 1 for b in batches for q in b["quotas"])
    with pytest.raises(AirflowFailException, match=r"anna — sales: \d+ due email\(s\) not sent, "
                                                   r"preflight FAIL: SPF"):
        tasks_send.send_task(blocked[0], context_for("manual__r3", map_index=len(batches) - 1))
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.emails WHERE mailbox_id = 1 "
                        "AND status <> 'queued'")[0]["n"] == 0


def test_resolve_dag_checks_ids_and_fails_when_nothing_was_resolved(db_url, alert_sink):
    import_demo(db_url)
    queue_due(db_url)
    held = leave_unconfirmed(db_url, 3)
    with pytest.raises(AirflowFailException, match=r"not unconfirmed emails: \[999999\]"):
        tasks_unconfirmed.resolve_task("not_sent", "Dana", f"{held[0]}, 999999", None, None, "")
    with pytest.raises(AirflowFailException, match="'2x' is not an email id"):
        tasks_unconfirmed.resolve_task("not_sent", "Dana", f"{held[0]}, 2x", None, None, "")
    with pytest.raises(AirflowFailException, match="no default"):
        tasks_unconfirmed.resolve_task(None, "Dana", f"{held[0]}", None, None, "")
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.emails WHERE failure_kind = 'unconfirmed'")[0]["n"] == 3
    out = tasks_unconfirmed.resolve_task("not_sent", "Dana", f" {held[0]} ,{held[1]}", None, None, "checked")
    assert out["resolved"] == held[:2]
    with pytest.raises(AirflowFailException, match="nothing was resolved"):
        tasks_unconfirmed.resolve_task("not_sent", "Dana", "", "no-such-campaign", None, "")


def test_required_action_records_exactly_the_listed_rows_by_the_airflow_user(db_url, alert_sink):
    import_demo(db_url)
    queue_due(db_url)
    listed = leave_unconfirmed(db_url, 2)
    collected = tasks_unconfirmed.review_collect_task("r1")
    assert collected["ids"] == listed
    assert "| id | Sent-folder evidence | campaign | step | recipient |" in collected["body"]
    # What was checked, in the words the campaign page uses (the same function, the same
    # IMAP accounts): the demo's mailboxes name an IMAP connection this test does not have.
    from outreach.airflow.connections import imap_account
    from outreach.report import collect
    from outreach.resolve import unconfirmed_details

    page = {u["id"]: u["evidence"] for u in collect(db_url, accounts=imap_account)["unconfirmed"]}
    assert page[listed[0]].startswith("not checked: Sent folder unreadable (connection "
                                      "outreach_imap_anna"), page
    import re

    shown = re.sub(r"([\\|`*_\[\]<>#])", r"\\\1", page[listed[0]])  # Markdown made inert
    assert f"| {listed[0]} | {shown} | q4-ops-intro | 1 | " in collected["body"]
    assert {u["id"]: u["evidence"] for u in unconfirmed_details(db_url)}[listed[0]] == (
        "not checked: this command does not search Sent folders (the Required Action and the "
        "campaign page do)")
    mid = unconfirmed_details(db_url)[0]["message_id"]
    assert f"| `{mid}` |" in collected["body"]
    assert "Confirm: send 2 email(s) again?" == collected["confirm_subject"]
    assert "recipient gets it twice" in collected["confirm_body"]
    assert f"| {listed[0]} | {shown} |" in collected["confirm_body"]
    assert "| unknown: the sender was lost mid-batch |" in collected["body"]
    assert "anna.schmidt@" not in collected["body"]
    with pytest.raises(AirflowSkipException):
        tasks_unconfirmed.review_collect_task("r2")  # each email is listed by one Required Action
    later = leave_unconfirmed(db_url, 1)  # not listed: must stay unconfirmed
    response = {"chosen_options": ["was sent"], "responded_by_user": {"id": "admin", "name": "admin"},
                "params_input": {}}
    out = tasks_unconfirmed.review_record_task(collected, response, "outreach_unconfirmed_review", "r1")
    assert out["resolved"] == listed and out["by"] == "admin"
    assert rows(db_url, "SELECT email_id, decision, resolved_by FROM outreach.email_resolutions "
                        "ORDER BY email_id") == [
        {"email_id": i, "decision": "was_sent", "resolved_by": "admin"} for i in listed]
    assert rows(db_url, "SELECT count(*) AS n FROM outreach.send_log WHERE source = 'operator'")[0]["n"] == 2
    assert rows(db_url, "SELECT failure_kind FROM outreach.emails WHERE id = %s", (later[0],))[0] == {
        "failure_kind": "unconfirmed"}
    third = tasks_unconfirmed.review_collect_task("r3")
    left = tasks_unconfirmed.review_record_task(third, {**response, "chosen_options": ["leave for later"]},
                                                "outreach_unconfirmed_review", "r3")
    assert left["resolved"] == [] and left["skipped"] == later
    # A requeue not confirmed (the confirmation said no, or never came) changes nothing.
    requeue = {**response, "chosen_options": ["not sent, requeue"]}
    for confirmation in (None, {**response, "chosen_options": [tasks_unconfirmed.REQUEUE_CANCEL]}):
        out = tasks_unconfirmed.review_record_task(third, requeue, "outreach_unconfirmed_review", "r3",
                                                   confirmation)
        assert out["decision"] == "leave_for_later" and out["resolved"] == []
    assert rows(db_url, "SELECT failure_kind FROM outreach.emails WHERE id = %s", (later[0],))[0] == {
        "failure_kind": "unconfirmed"}
    out = tasks_unconfirmed.review_record_task(third, requeue, "outreach_unconfirmed_review", "r3",
                                               {**response, "chosen_options": [tasks_unconfirmed.REQUEUE_CONFIRM]})
    assert out["decision"] == "not_sent" and out["resolved"] == later
    assert rows(db_url, "SELECT status::text AS s FROM outreach.emails WHERE id = %s",
                (later[0],))[0] == {"s": "queued"}


def test_import_fails_at_once_on_what_cannot_heal(db_url, alert_sink, tmp_path):
    from support.paths import CAMPAIGN, MAILBOXES

    with pytest.raises(AirflowFailException, match=r"include/data/nope\.csv: cannot read: No such file"):
        tasks_import.import_task(str(CAMPAIGN), str(MAILBOXES), "include/data/nope.csv", None)
    bad = tmp_path / "no_email.csv"
    bad.write_text("Name,Company\nJane,Acme\n")
    with pytest.raises(AirflowFailException, match="no email column"):
        tasks_import.import_task(str(CAMPAIGN), str(MAILBOXES), str(bad), None)


def test_bounce_rate_above_the_warning_level_is_alerted_once_a_day(db_url, alert_sink, sink, settings):
    from outreach.suppression import suppress
    from support.flow import send_all

    import_demo(db_url)
    queue_due(db_url)
    send_all(db_url, settings)
    sent = rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                        " WHERE e.mailbox_id = 1 AND e.status = 'sent' ORDER BY e.id")
    n = len(sent)
    bounced = n * 2 // 100 + 1  # just above 2 %, below 3 %
    assert 0.02 < bounced / n < 0.03
    with db.transaction(db_url) as conn:
        for r in sent[:bounced]:
            suppress(conn, r["email"], "bounced", "test:late-bounce")
    assert len(airflow_alerts.alert_bounce_warnings(db_url)) == 1
    assert airflow_alerts.alert_bounce_warnings(db_url) == []
    [m] = alert_sink.messages()
    assert subject_of(m) == "outreach: mailbox anna — sales bounce rate warning"
    assert f"({bounced} of {n} sends), above the warning level 2 %" in body_of(m)
    assert rows(db_url, "SELECT status FROM outreach.mailboxes WHERE id = 1") == [{"status": "active"}]


def test_report_days_keep_unknown_postmaster_days_unknown(db_url):
    from outreach.report import collect

    import_demo(db_url)
    today = dt.datetime.now(dt.UTC).date()
    with db.transaction(db_url) as conn:
        conn.execute("INSERT INTO outreach.postmaster_stats (domain, metric, day, value, has_data) VALUES"
                     " ('mail.outreach-demo.example', 'SPAM_RATE', %s, 0.0012, true),"
                     " ('mail.outreach-demo.example', 'SPAM_RATE', %s, NULL, false)",
                     (today - dt.timedelta(days=3), today - dt.timedelta(days=2)))
    report = collect(db_url, now=dt.datetime.combine(today, dt.time(12), dt.UTC))
    anna = [d for d in report["days"] if d["mailbox_id"] == 1]
    assert len(anna) == 30 and anna[-1]["day"] == today
    assert [d["spam_rate"] for d in anna[-5:]] == [None, 0.0012, None, None, None]  # never 0
    assert report["spam_rate_threshold"] == 0.001
    assert all(d["daily_cap"] == 150 and d["daily_limit"] == 150 for d in anna)
