"""The ``outreach_inbox`` DAG through real Airflow (``airflow dags test``) against a real Dovecot:
one mapped read per account, and a mailbox that cannot be read fails its task with one line
naming the connection and the IMAP stage."""

from __future__ import annotations

import json

import pytest

from support.airflowhome import env_for, fresh_home
from support.flow import rows
from support.inboxflow import IMAP_CONN_IDS, bounce_sample, sent_campaign

pytestmark = pytest.mark.airflow


def test_inbox_dag_reads_each_mailbox_and_fails_red_on_a_bad_login(
        db_url, sink, settings, tmp_path, imap_accounts, migrated_airflow_home, shared_airflow):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    sent = sent_campaign(db_url, tmp_path, settings, ["gone@bounce.example", "stays@quiet.example"])
    imap_accounts.append("outreach_imap_anna",
                         bounce_sample("postfix_01.txt", "xxxxx@local.ie", "gone@bounce.example",
                                       sent["gone@bounce.example"]["message_id"]))
    env = env_for(fresh_home(migrated_airflow_home, tmp_path, "home"), db_url, sink)
    env.update(imap_accounts.env())
    # Ben's password is wrong: his task fails red with one line; Anna's read still runs.
    bad = json.loads(env["AIRFLOW_CONN_OUTREACH_IMAP_BEN"])
    bad["password"] = "pw-wrong-7f3a"
    env["AIRFLOW_CONN_OUTREACH_IMAP_BEN"] = json.dumps(bad)
    result = shared_airflow.run_dag(env, "outreach_inbox", tmp_path / "inbox.log")
    log = result.log.read_text()
    assert not result.ok
    assert ("inbox b***@mail.outreach-demo.example (connection outreach_imap_ben) could not be "
            "read: IMAP stage LOGIN") in log, log[-4000:]
    assert "inbox a***@mail.outreach-demo.example (connection outreach_imap_anna): fetched=1 " \
           "replies=0 auto_replies=0 hard_bounces=1" in log, log[-4000:]
    assert "inbox u***@mail.outreach-demo.example (connection outreach_imap_unsubscribe): fetched=0" in log
    assert rows(db_url, "SELECT value, reason FROM outreach.suppressions") == [
        {"value": "gone@bounce.example", "reason": "bounced"}]
    assert "gone@bounce.example" not in log  # addresses are masked in the logs
    assert "pw-wrong-7f3a" not in log
