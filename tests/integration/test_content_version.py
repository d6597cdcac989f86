"""Content versions (issue 24, item 5): every send-log row names the copy its message was built
from, the preview shows the same version, and editing a template makes a new one."""

from __future__ import annotations

import shutil

from outreach.content import content_version
from outreach.preview import preview
from outreach.queue import queue_due
from support.flow import import_demo, rows, send_all
from support.paths import ROOT


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
