"""Issue 26, item 5: ``outreach_notify_replies`` run by real Airflow (``airflow dags test``)
sends one notice per new reply through the SMTP notifier to a real SMTP sink — the lead masked,
campaign, step and the first lines the lead typed (read again from a real Dovecot), escaped —
and a second run (a re-run, or the DAG cleared) sends nothing again."""

from __future__ import annotations

import html
import re

import pytest

from outreach.dev.devsmtp import MaildirServer
from support.airflowhome import env_for, fresh_home
from support.alerts import OPS, subject_of
from support.inboxflow import read_all, replied_campaign

pytestmark = pytest.mark.airflow


@pytest.fixture
def notice_sink(tmp_path):
    server = MaildirServer(tmp_path / "notices").start()
    yield server
    server.stop()


def text_of(message) -> str:
    part = next(p for p in message.walk() if p.get_content_type() == "text/html")
    raw = part.get_payload(decode=True).decode()
    assert "<b>" not in raw  # the lead's text is escaped, never markup
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_a_reply_is_notified_once_with_its_first_lines(
        db_url, sink, settings, tmp_path, imap_accounts, migrated_airflow_home, shared_airflow,
        notice_sink):
    replied_campaign(db_url, tmp_path, settings, imap_accounts, "rita.lopez@reply.example",
                     "Yes, let's talk on Tuesday.\n\nCall me at <b>noon</b>.\n> On Monday you wrote:\n> hello")
    read_all(db_url)  # what outreach_inbox's read does: the reply event is recorded
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    env.update(imap_accounts.env())
    env.update({"AIRFLOW_CONN_OUTREACH_ALERTS": notice_sink.connection_json(),
                "OUTREACH_ALERT_TO": OPS, "OUTREACH_ALERT_FROM": "outreach@outreach-test.example"})

    first = shared_airflow.run_dag(env, "outreach_notify_replies", tmp_path / "first.log")
    assert first.ok, first.log.read_text()[-4000:]
    [notice] = notice_sink.messages()
    assert subject_of(notice) == "outreach: 1 new reply (q4-ops-intro)"
    body = text_of(notice)
    assert "Reply from r***@reply.example — campaign q4-ops-intro, step 1, mailbox anna — sales" in body
    assert "> Yes, let's talk on Tuesday.\n> Call me at <b>noon</b>." in body
    assert "On Monday you wrote" not in body  # quoted text is not the lead's
    assert "rita.lopez" not in body and "rita.lopez" not in first.log.read_text()

    again = shared_airflow.run_dag(env, "outreach_notify_replies", tmp_path / "again.log")
    assert again.ok, again.log.read_text()[-4000:]
    assert len(notice_sink.messages()) == 1  # the same reply is never notified twice
