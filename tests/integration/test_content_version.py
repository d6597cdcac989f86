"""Content versions (issue 24, item 5): every send-log row names the copy its message was built
from, the preview shows the same version, and editing a template makes a new one; the
campaign's version also covers its calendar (issue 25, item 4), which moves every send day."""

from __future__ import annotations

import shutil

import pytest

from outreach.campaign import Campaign
from outreach.campaign_pause import CampaignStateError, change_status
from outreach.content import campaign_content_version, content_version
from outreach.preview import preview
from outreach.queue import queue_due
from support.flow import import_demo, rows, scalar, send_all
from support.paths import CAMPAIGN, ROOT


def test_every_send_names_its_content_version(db_url, sink, settings):
    import_demo(db_url)
    queue_due(db_url)
    [item] = preview(db_url, "q4-ops-intro", settings, sample=1)
    send_all(db_url, settings)
    versions = rows(db_url, "SELECT DISTINCT content_version AS v FROM outreach.send_log")
    expected = content_version("ops_intro", "{{ lead.company }} and late deliveries",
                               campaign_key="q4-ops-intro",
                               campaign_name="Q4 operations leaders — intro")
    assert versions == [{"v": expected}]
    assert f"step content version {expected}" in item.notes


def test_editing_a_template_or_subject_makes_a_new_version(tmp_path):
    folder = tmp_path / "templates"
    shutil.copytree(ROOT / "include" / "templates", folder)
    first = content_version("ops_intro", "Hi", directory=folder)
    assert content_version("ops_intro", "Hi", directory=folder) == first
    assert content_version("ops_intro", "Hello", directory=folder) != first
    html = folder / "ops_intro.html.j2"
    html.write_text(html.read_text() + "<p>P.S.</p>\n")
    assert content_version("ops_intro", "Hi", directory=folder) != first


def _calendar_campaign(**calendar: object) -> Campaign:
    """A two-step campaign written here (its version depends on nothing outside the test)."""
    return Campaign.model_validate({
        "key": "cal-test", "name": "Calendar test", "timezone": "Europe/Berlin",
        "send_window": {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00",
                        "end": "17:00"},
        "mailboxes": ["a@example.com"],
        "steps": [{"template": "intro", "subject": "Hi", "delay_days": 0},
                  {"template": "intro", "subject": "Again", "delay_days": 3}], **calendar})


def test_the_calendar_is_part_of_the_campaign_version(tmp_path):
    (tmp_path / "intro.txt.j2").write_text("Hello {{ lead.first_name }}\n")
    (tmp_path / "intro.html.j2").write_text("<p>Hello {{ lead.first_name }}</p>\n")

    def version(**calendar: object) -> str:
        return campaign_content_version(_calendar_campaign(**calendar), directory=tmp_path)

    # The version this campaign had before the calendar counted (main at ceed240): a campaign
    # on the default calendar keeps it, so its approval still holds after the upgrade.
    plain = version()
    assert plain == "234408cd5e4df2ec"
    assert version(business_days=False, blackout_dates=[]) == plain
    # Each setting that moves a send day is a new version, and each value another one.
    changed = [version(business_days=True), version(country="DE"), version(country="AT"),
               version(blackout_dates=["2026-12-24"]),
               version(blackout_dates=["2026-12-24", "2026-12-31"])]
    assert len({plain, *changed}) == 1 + len(changed)
    # As synced: the country's case and the dates' order or repeats change nothing.
    assert version(country="de") == version(country="DE")
    assert (version(blackout_dates=["2026-12-31", "2026-12-24", "2026-12-24"])
            == version(blackout_dates=["2026-12-24", "2026-12-31"]))


def test_a_blackout_date_added_to_an_active_campaign_needs_a_second_approval(
        db_url, tmp_path, monkeypatch):
    # The demo file says `status: active`: its first content is taken as approved.
    import_demo(db_url)
    approved = scalar(db_url, "SELECT approved_content_version FROM outreach.campaigns")
    edited = tmp_path / "demo.yaml"
    edited.write_text(CAMPAIGN.read_text() + "blackout_dates: [2026-12-24]\n")
    monkeypatch.setattr("support.flow.CAMPAIGN", edited)
    import_demo(db_url)
    assert scalar(db_url, "SELECT status FROM outreach.campaigns") == "awaiting_approval"
    shown = scalar(db_url, "SELECT content_version FROM outreach.campaigns")
    assert shown != approved
    # The approval of the old version no longer applies; the version shown does.
    with pytest.raises(CampaignStateError, match="its content changed"):
        change_status(db_url, "q4-ops-intro", "approve", "bob", "ok", content_version=approved)
    assert change_status(db_url, "q4-ops-intro", "approve", "bob", "ok",
                         content_version=shown).status == "active"
