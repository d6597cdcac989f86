"""A campaign finishes by itself (issue 24, item 1): once every enrolment is done (last step sent,
or the sequence stopped: replied, unsubscribed, a step that ended unsent) and nothing is queued,
sending or unconfirmed, queue-due's one guarded UPDATE (outreach.finish_campaigns_v1) makes it
``finished`` with its campaign_events row. A finished campaign takes no new leads: the import
names each such line, the database refuses an enrolment made by hand. A campaign fed by a
``source:`` or without enrolments does not finish. Real PostgreSQL, real aiosmtpd."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from outreach import db
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.suppression import suppress
from support.flow import leads_csv, one_mailbox, outreach, rows, scalar, send_all
from support.paths import CAMPAIGN, MAILBOXES

T0 = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)  # the demo's window is always open
KEY = "q4-ops-intro"


def _status(db_url: str) -> str:
    return scalar(db_url, "SELECT status FROM outreach.campaigns WHERE key = %s", (KEY,))


def _stop(db_url: str, address: str, status: str = "replied") -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("SELECT outreach.stop_enrollment(en.id, %s, 'a reply was read', 'test') "
                     "FROM outreach.enrollments en JOIN outreach.leads l ON l.id = en.lead_id "
                     "WHERE l.email = %s", (status, address))


def test_a_campaign_finishes_once_every_enrolment_is_done(db_url, sink, settings, tmp_path):
    leads = [f"f{i}@finish{i}.example" for i in range(4)]
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, leads), now=T0)
    one_mailbox(db_url)
    assert queue_due(db_url, now=T0)["queued"] == 4
    _stop(db_url, leads[1])  # replied before step 1 went out: its step is cancelled
    assert queue_due(db_url, now=T0)["finished"] == []  # three step-1 rows queued
    send_all(db_url, settings, now=T0)
    with db.connect(db_url) as conn:
        suppress(conn, leads[2], "unsubscribed", "test")  # after step 1: no step 2, ever
        conn.commit()
    # Step 2 is not due yet (3 days): f0 and f3 still have a step to go.
    assert queue_due(db_url, now=T0 + dt.timedelta(hours=1))["finished"] == []
    later = T0 + dt.timedelta(days=3, hours=1)
    result = queue_due(db_url, now=later)
    assert (result["queued"], result["finished"]) == (2, [])  # queued: in flight
    assert _status(db_url) == "active"
    send_all(db_url, settings, now=later)
    assert queue_due(db_url, now=later)["finished"] == [KEY]
    assert _status(db_url) == "finished"
    assert rows(db_url, "SELECT ev.event, ev.actor, ev.created_at FROM outreach.campaign_events ev"
                ) == [{"event": "finished", "actor": "outreach", "created_at": later}]
    assert scalar(db_url, "SELECT count(*) FROM outreach.events WHERE kind = "
                  "'campaign_finished'") == 1
    assert queue_due(db_url, now=later)["finished"] == []  # once: final
    assert scalar(db_url, "SELECT count(*) FROM outreach.campaign_events") == 1
    assert len(sink.messages()) == 3 + 2


def test_an_unconfirmed_email_keeps_it_open(db_url, settings, sink, tmp_path):
    leads = ["u0@open0.example", "u1@open1.example"]
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, leads), now=T0)
    one_mailbox(db_url)
    queue_due(db_url, now=T0)
    _stop(db_url, leads[1])
    with psycopg.connect(db_url) as conn:  # what the reaper leaves for a person to decide
        conn.execute("UPDATE outreach.emails SET status = 'failed', failure_kind = 'unconfirmed', "
                     "last_error = 'no reply after DATA' WHERE status = 'queued'")
    assert queue_due(db_url, now=T0)["finished"] == []
    assert _status(db_url) == "active"


def test_a_finished_campaign_takes_no_new_leads_and_the_import_says_so_per_line(
        db_url, tmp_path):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["old@done.example"]), now=T0)
    _stop(db_url, "old@done.example", "stopped")
    p = outreach(db_url, "queue-due")  # as an operator runs it
    assert p.returncode == 0, p.stderr
    assert f"campaign {KEY} finished: every enrolment is done" in p.stdout
    assert queue_due(db_url, now=T0) == {"queued": 0, "per_mailbox": {}, "held": [],
                                         "finished": []}
    later = leads_csv(tmp_path, ["old@done.example", "new1@late.example", "not-an-address",
                                 "new2@late.example"], name="later.csv")
    result = import_leads(db_url, CAMPAIGN, MAILBOXES, later, now=T0)
    assert (result.imported, result.enrolled, result.not_enrolled) == (2, 0, 2)
    assert [str(p) for p in result.problems if p.action == "not enrolled"] == [
        f"line {n}, field campaign: campaign {KEY} is finished: a finished campaign takes no new "
        "leads (import them into a new campaign) (lead stored, not enrolled)" for n in (3, 5)]
    assert "not_enrolled=2 (campaign q4-ops-intro is finished" in result.summary()
    stored = scalar(db_url, "SELECT problems FROM outreach.import_runs WHERE id = %s",
                    (result.run_id,))
    assert [p["line"] for p in stored if p["action"] == "not enrolled"] == [3, 5]
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation,
                                                        match="is finished"):
        conn.execute("INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id) "
                     "SELECT c.id, l.id, 1 FROM outreach.campaigns c, outreach.leads l "
                     "WHERE l.email = 'new1@late.example'")
    assert queue_due(db_url, now=T0 + dt.timedelta(days=9))["queued"] == 0


def test_a_campaign_fed_by_a_source_or_without_leads_does_not_finish(db_url, tmp_path):
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["s@src.example"]), now=T0)
    with psycopg.connect(db_url) as conn:
        conn.execute("DELETE FROM outreach.enrollments")
    assert queue_due(db_url, now=T0)["finished"] == []  # approved, waiting for its leads
    fed = tmp_path / "fed.yaml"
    fed.write_text(CAMPAIGN.read_text() + f'source:\n  files:\n    path: "file://{tmp_path}/in/*.csv"\n')
    import_leads(db_url, fed, MAILBOXES, leads_csv(tmp_path, ["s@src.example"]), now=T0)
    _stop(db_url, "s@src.example")
    assert queue_due(db_url, now=T0)["finished"] == []  # its source may bring leads tomorrow
    assert _status(db_url) == "active"
