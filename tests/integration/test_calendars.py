"""The calendar (issue 25 item 4, migration 0137): public holidays of the lead's country,
campaign blackout dates and a mailbox freeze are outside every send window, and
``business_days: true`` counts delay_days in working days — decided by email_queue_due and
outreach.claim_emails_v3 in SQL, driven here through the real import, queue-due and sender with
a fixed clock, at a real SMTP sink."""

from __future__ import annotations

import datetime as dt
import json
from email.utils import parseaddr
from pathlib import Path

from outreach import db, report
from outreach.airflow.connections import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.send import send_batch
from support.scenario import ADDRESS, CONN_ID

UTC = dt.UTC
# Ascension Day (Christi Himmelfahrt), a public holiday in all of Germany, not in Great Britain.
ASCENSION = dt.date(2026, 5, 14)


def _files(tmp_path: Path, *, leads: list[tuple[str, str]], campaign_extra: str = "",
           steps: str = "  - template: ops_intro\n    subject: Hello\n    delay_days: 0\n",
           window: str = "days: [mon, tue, wed, thu, fri]\n  start: \"09:00\"\n  end: \"17:00\"",
           timezone: str = "Europe/Berlin", mailbox_extra: str = "") -> tuple[Path, Path, Path]:
    (tmp_path / "mailboxes.yaml").write_text(
        f"mailboxes:\n  - address: {ADDRESS}\n    smtp_conn_id: {CONN_ID}\n"
        f"    timezone: {timezone}\n    daily_cap: 100\n{mailbox_extra}")
    (tmp_path / "campaign.yaml").write_text(
        f"key: calendar-test\nname: Calendar test\nstatus: active\ntimezone: {timezone}\n"
        f"send_window:\n  {window}\nmailboxes:\n  - {ADDRESS}\n"
        f"{campaign_extra}steps:\n{steps}")
    (tmp_path / "leads.csv").write_text(
        "Email,First Name,Company Name,Country\n"
        + "".join(f"{email},Lee,Acme,{country}\n" for email, country in leads))
    return tmp_path / "campaign.yaml", tmp_path / "mailboxes.yaml", tmp_path / "leads.csv"


def _import(url: str, files: tuple[Path, Path, Path], now: dt.datetime) -> int:
    result = import_leads(url, *files, now=now)
    assert result.imported >= 1, result.summary()
    with db.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT id FROM outreach.mailboxes WHERE address = %s",
                            (ADDRESS,)).fetchone()["id"]


def _send(url: str, mailbox: int, settings, now: dt.datetime) -> int:
    return send_batch(url, mailbox, 50, smtp_connector, settings, worker="w", now=now).sent


def _to(sink) -> list[str]:
    return sorted(parseaddr(m["To"])[1] for m in sink.messages())


def _rows(url: str) -> dict[str, dict]:
    with db.connect(url, autocommit=True) as conn:
        return {r["email"]: r for r in conn.execute(
            "SELECT l.email, e.status::text AS status, e.scheduled_for, e.hold_reason"
            " FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id")}


def test_holidays_come_from_the_holidays_package(db_url):
    from outreach.calendars import country_holidays

    assert country_holidays("DE", 2026)[ASCENSION] == "Ascension Day"
    assert ASCENSION not in country_holidays("GB", 2026)
    assert country_holidays("XX", 2026) is None


def test_a_step_due_on_a_de_holiday_goes_out_the_next_working_day(db_url, sink, settings,
                                                                    tmp_path):
    """Queued on the holiday: the German lead's row is scheduled for the next working day at
    the window's start in its zone; the British lead (same campaign) goes out the same day."""
    files = _files(tmp_path, leads=[("de@acme.example", "de"), ("gb@acme.example", "GB")])
    mb = _import(db_url, files, dt.datetime(2026, 5, 13, 18, tzinfo=UTC))
    assert queue_due(db_url, now=dt.datetime(2026, 5, 14, 7, 30, tzinfo=UTC))["queued"] == 2
    rows = _rows(db_url)
    # 09:00 in Berlin (CEST) on Friday 15 May.
    assert rows["de@acme.example"]["scheduled_for"] == dt.datetime(2026, 5, 15, 7, tzinfo=UTC)
    assert _send(db_url, mb, settings, dt.datetime(2026, 5, 14, 8, tzinfo=UTC)) == 1
    assert _to(sink) == ["gb@acme.example"]
    assert _send(db_url, mb, settings, dt.datetime(2026, 5, 15, 6, 59, tzinfo=UTC)) == 0
    assert _send(db_url, mb, settings, dt.datetime(2026, 5, 15, 7, 5, tzinfo=UTC)) == 1
    assert _to(sink) == ["de@acme.example", "gb@acme.example"]


def test_the_claim_holds_a_row_due_on_a_holiday_and_the_report_says_why(db_url, sink, settings,
                                                                        tmp_path):
    """Queued the day before (due then), claimed on the holiday: the German row stays queued,
    moves to the next working day with hold_reason 'holiday in DE' (report --json 'waiting'),
    and goes out then; the campaign's own `country:` covers a lead without one."""
    files = _files(tmp_path, leads=[("de@acme.example", ""), ("gb@acme.example", "GB")],
                   campaign_extra="country: DE\n")
    mb = _import(db_url, files, dt.datetime(2026, 5, 13, 13, tzinfo=UTC))
    assert queue_due(db_url, now=dt.datetime(2026, 5, 13, 14, tzinfo=UTC))["queued"] == 2
    assert _send(db_url, mb, settings, dt.datetime(2026, 5, 14, 8, tzinfo=UTC)) == 1
    assert _to(sink) == ["gb@acme.example"]
    de = _rows(db_url)["de@acme.example"]
    assert (de["status"], de["hold_reason"]) == ("queued", "holiday in DE")
    assert de["scheduled_for"] == dt.datetime(2026, 5, 15, 7, tzinfo=UTC)
    waiting = json.loads(report.render_json(report.collect(db_url)))["waiting"]
    assert [{k: w[k] for k in ("campaign", "step", "reason", "emails")} for w in waiting] == [
        {"campaign": "calendar-test", "step": 1, "reason": "holiday in DE", "emails": 1}]
    assert _send(db_url, mb, settings, dt.datetime(2026, 5, 15, 7, 5, tzinfo=UTC)) == 1
    assert _to(sink) == ["de@acme.example", "gb@acme.example"]
    assert _rows(db_url)["de@acme.example"]["hold_reason"] is None


def test_business_days_skip_the_weekend(db_url, sink, settings, tmp_path):
    """Step 1 sent on Thursday, step 2 `delay_days: 3` with business_days: due Tuesday (Fri,
    Mon, Tue), not Sunday, although the send window is open every day."""
    files = _files(tmp_path, leads=[("ann@acme.example", "")], timezone="UTC",
                   window="days: [mon, tue, wed, thu, fri, sat, sun]\n  start: \"00:00\"\n"
                          "  end: \"24:00\"",
                   campaign_extra="business_days: true\n",
                   steps="  - template: ops_intro\n    subject: Hello\n    delay_days: 0\n"
                         "  - template: ops_intro\n    subject: Again\n    delay_days: 3\n")
    thursday = dt.datetime(2026, 3, 5, 10, tzinfo=UTC)
    mb = _import(db_url, files, thursday - dt.timedelta(hours=1))
    assert queue_due(db_url, now=thursday - dt.timedelta(minutes=30))["queued"] == 1
    assert _send(db_url, mb, settings, thursday) == 1
    for day in (8, 9):  # Sunday (three calendar days), Monday (two working days)
        assert queue_due(db_url, now=dt.datetime(2026, 3, day, 12, tzinfo=UTC))["queued"] == 0
    assert queue_due(db_url, now=dt.datetime(2026, 3, 10, 9, 59, tzinfo=UTC))["queued"] == 0
    assert queue_due(db_url, now=dt.datetime(2026, 3, 10, 10, tzinfo=UTC))["queued"] == 1
    assert _send(db_url, mb, settings, dt.datetime(2026, 3, 10, 10, 5, tzinfo=UTC)) == 1
    assert sorted(m["Subject"] for m in sink.messages()) == ["Again", "Hello"]


def test_a_blackout_date_sends_nothing_that_day(db_url, sink, settings, tmp_path):
    files = _files(tmp_path, leads=[("ann@acme.example", ""), ("bob@acme.example", "")],
                   timezone="UTC", campaign_extra="blackout_dates: [2026-03-05]\n",
                   window="days: [mon, tue, wed, thu, fri, sat, sun]\n  start: \"00:00\"\n"
                          "  end: \"24:00\"")
    mb = _import(db_url, files, dt.datetime(2026, 3, 4, 23, tzinfo=UTC))
    assert queue_due(db_url, now=dt.datetime(2026, 3, 4, 23, 30, tzinfo=UTC))["queued"] == 2
    for hour in (0, 10, 23):
        assert _send(db_url, mb, settings, dt.datetime(2026, 3, 5, hour, 5, tzinfo=UTC)) == 0
    assert sink.messages() == []
    rows = _rows(db_url)
    assert {(r["status"], r["hold_reason"], r["scheduled_for"]) for r in rows.values()} == {
        ("queued", "blackout date 2026-03-05", dt.datetime(2026, 3, 6, tzinfo=UTC))}
    # Queued on the blackout date itself, a row is scheduled past it.
    with db.connect(db_url, autocommit=True) as conn:
        slot = conn.execute(
            "SELECT outreach.next_open_slot('2026-03-05 10:00+00', 'UTC', '{1,2,3,4,5,6,7}',"
            " '00:00', '24:00', NULL, '{2026-03-05}') AS at").fetchone()["at"]
    assert slot == dt.datetime(2026, 3, 6, tzinfo=UTC)
    assert _send(db_url, mb, settings, dt.datetime(2026, 3, 6, 0, 5, tzinfo=UTC)) == 2
    assert _to(sink) == ["ann@acme.example", "bob@acme.example"]


def test_a_frozen_mailbox_sends_nothing_on_its_dates(db_url, sink, settings, tmp_path):
    files = _files(tmp_path, leads=[("ann@acme.example", "")], timezone="UTC",
                   mailbox_extra="    freeze: {from: 2026-03-05, to: 2026-03-06}\n",
                   window="days: [mon, tue, wed, thu, fri, sat, sun]\n  start: \"00:00\"\n"
                          "  end: \"24:00\"")
    mb = _import(db_url, files, dt.datetime(2026, 3, 4, 23, tzinfo=UTC))
    assert queue_due(db_url, now=dt.datetime(2026, 3, 4, 23, 30, tzinfo=UTC))["queued"] == 1
    for day, hour in ((5, 0), (5, 12), (6, 23)):
        assert _send(db_url, mb, settings, dt.datetime(2026, 3, day, hour, 5, tzinfo=UTC)) == 0
    assert sink.messages() == []
    assert _rows(db_url)["ann@acme.example"]["status"] == "queued"
    assert _send(db_url, mb, settings, dt.datetime(2026, 3, 7, 0, 5, tzinfo=UTC)) == 1
    assert len(sink.messages()) == 1
