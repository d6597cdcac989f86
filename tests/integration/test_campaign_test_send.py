"""``outreach campaign test-send`` (issue 24): the real mailbox sends a step, rendered for a
lead, to seed addresses; the send is recorded as a test, counts toward the mailbox's daily cap,
and changes no enrolment, queue row or lead. Real PostgreSQL, real aiosmtpd on loopback."""

from __future__ import annotations

import psycopg
import pytest

from outreach import db
from outreach.airflow.connections import smtp_connector
from outreach.store import mailboxes
from outreach.suppression import suppress
from outreach.testsend import TestSendRefused, send_to_seeds
from support.flow import import_demo, outreach, rows, scalar
from support.paths import CAMPAIGN

SNAPSHOT = {
    "enrollments": "SELECT id, xmin::text AS x, status FROM outreach.enrollments ORDER BY id",
    "emails": "SELECT id, xmin::text AS x, status FROM outreach.emails ORDER BY id",
    "leads": "SELECT id, xmin::text AS x FROM outreach.leads ORDER BY id",
    "send_log": "SELECT id FROM outreach.send_log ORDER BY id",
}


def _snapshot(url):
    return {name: rows(url, sql) for name, sql in SNAPSHOT.items()}


def _used(url, mailbox_id):
    with db.connect(url) as conn:
        return mailboxes.mailbox_remaining_today(conn, mailbox_id=mailbox_id, now=None,
                                                 interval=None, gap_seconds=0, horizon=None,
                                                 gap_jitter=0).used


def test_test_send_reaches_the_sink_and_changes_nothing_else(db_url, sink, settings):
    import_demo(db_url)
    lead = scalar(db_url, "SELECT l.email FROM outreach.leads l JOIN outreach.enrollments en "
                          "ON en.lead_id = l.id ORDER BY l.id LIMIT 1")
    mailbox_id = scalar(db_url, "SELECT mailbox_id FROM outreach.enrollments ORDER BY lead_id "
                                "LIMIT 1")
    before = _snapshot(db_url)
    used = _used(db_url, mailbox_id)
    results = send_to_seeds(db_url, "q4-ops-intro", ["seed1@seeds.example", "Seed2@Seeds.example"],
                        settings, smtp_connector, actor="alice", lead=lead)
    assert [(r.recipient, r.sent) for r in results] == [("seed1@seeds.example", True),
                                                        ("seed2@seeds.example", True)]
    got = sink.messages()
    assert sorted(m["X-RcptTo"] for m in got) == ["seed1@seeds.example", "seed2@seeds.example"]
    assert {m["Message-ID"].strip("<>") for m in got} == {r.message_id for r in results}
    assert all("List-Unsubscribe" in m for m in got)
    assert _snapshot(db_url) == before  # no enrolment, queue row, lead or send-log row changed
    assert scalar(db_url, "SELECT count(*) FROM outreach.test_sends WHERE actor = 'alice'") == 2
    assert _used(db_url, mailbox_id) == used + 2  # a real send: it counts toward the cap


def test_test_send_refuses_a_suppressed_seed_and_a_full_mailbox(db_url, sink, settings):
    import_demo(db_url)
    with db.connect(db_url) as conn:
        suppress(conn, "optedout@seeds.example", "unsubscribed", "test")
        conn.commit()
    [r] = send_to_seeds(db_url, "q4-ops-intro", ["optedout@seeds.example"], settings, smtp_connector,
                    actor="alice")
    assert (r.sent, r.reply) == (False, "suppressed: never sent (outreach.is_suppressed)")
    assert sink.messages() == []
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.mailboxes SET daily_cap = 1, warmup_start = NULL")
    send_to_seeds(db_url, "q4-ops-intro", ["seed1@seeds.example"], settings, smtp_connector,
              actor="alice")
    with pytest.raises(TestSendRefused, match="daily limit reached"):
        send_to_seeds(db_url, "q4-ops-intro", ["seed2@seeds.example"], settings, smtp_connector,
                  actor="alice")
    assert len(sink.messages()) == 1


def test_the_commands_preview_test_send_and_approve(db_url, sink, tmp_path, monkeypatch):
    """The real ``outreach campaign`` commands, as an operator runs them, on a draft."""
    draft = tmp_path / "draft.yaml"
    draft.write_text(CAMPAIGN.read_text().replace("status: active\n", ""))
    monkeypatch.setattr("support.flow.CAMPAIGN", draft)
    import_demo(db_url)
    p = outreach(db_url, "campaign", "preview", "q4-ops-intro", "--sample", "2")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("List-Unsubscribe-Post: List-Unsubscribe=One-Click") == 2
    assert "Message-ID and unsubscribe token are placeholders" in p.stdout
    assert p.stdout.count("\n--- text part\n") == 2 and "MIME-Version" not in p.stdout
    p = outreach(db_url, "campaign", "preview", "q4-ops-intro", "--lead",
                 "amelie.dubois@contoso-freight.example", "--raw")
    assert p.returncode == 0 and "\nMIME-Version: 1.0\n" in p.stdout, p.stderr
    p = outreach(db_url, "campaign", "test-send", "q4-ops-intro", "--to", "seed@seeds.example")
    assert p.returncode == 0 and "sent, Message-ID <" in p.stdout, p.stderr
    assert [m["X-RcptTo"] for m in sink.messages()] == ["seed@seeds.example"]
    p = outreach(db_url, "campaign", "approve", "q4-ops-intro")
    assert p.returncode == 1 and "is 'draft'; approve needs 'awaiting_approval'" in p.stderr
    for verb in ("submit", "approve"):
        p = outreach(db_url, "campaign", verb, "q4-ops-intro", "--by", "carol")
        assert p.returncode == 0, p.stderr
    assert "approved: active" in p.stdout
    assert scalar(db_url, "SELECT approved_by FROM outreach.campaigns") == "carol"
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 0  # the test send queued none
