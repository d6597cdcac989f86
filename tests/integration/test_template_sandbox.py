"""Templates render in the sandbox, counted at a real SMTP server (issue 31, item 1).

A template edited after the campaign was loaded (campaign files and templates synced from
elsewhere) is only checked when a row renders it: every escape fails its row at stage RENDER and
nothing reaches the server; a template that would render 100 MB for one lead fails that row with
a size reason while the rest of the batch goes out.
"""

from __future__ import annotations

import shutil

import pytest

from outreach.campaign import ConfigError
from outreach.leads import import_leads
from outreach.queue import queue_due
from support import invariants
from support.flow import leads_csv, rows, send_all
from support.paths import CAMPAIGN, MAILBOXES, ROOT

SECRET = "test-secret-0123456789"  # the settings fixture's OUTREACH_UNSUBSCRIBE_SECRET

ESCAPES = [
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ cycler.__init__.__globals__.os.environ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ self.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
]


@pytest.fixture
def templates(tmp_path, monkeypatch):
    folder = tmp_path / "templates"
    shutil.copytree(ROOT / "include" / "templates", folder)
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(folder))
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", SECRET)
    return folder


def _leads(tmp_path):
    return leads_csv(tmp_path, [f"p{i}@acme{i}.example,Pat,Acme {i}" for i in range(1, 5)]
                     + ["q@coho.example,Quinn,Coho Winery"])


def _prepend(folder, line):
    for suffix in ("txt.j2", "html.j2"):
        f = folder / f"ops_intro.{suffix}"
        f.write_text(line + "\n" + f.read_text())


@pytest.mark.parametrize("escape", ESCAPES)
def test_an_escape_in_an_edited_template_sends_nothing(db_url, sink, settings, tmp_path,
                                                       templates, escape):
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, _leads(tmp_path))
    assert r.imported == 5
    assert queue_due(db_url)["queued"] == 5
    _prepend(templates, escape)  # edited after the load: only the send can see it
    summaries = send_all(db_url, settings)
    assert sum(s.sent for s in summaries) == 0 and sum(s.failed for s in summaries) == 5
    assert sink.messages() == []
    failed = rows(db_url, "SELECT failure_kind, last_error FROM outreach.emails")
    assert all(f["failure_kind"] == "render" for f in failed)
    assert all("template 'ops_intro' (text part)" in f["last_error"] for f in failed)
    assert not any(SECRET in f["last_error"] or "uid=" in f["last_error"] for f in failed)


def test_an_escape_in_a_subject_fails_the_campaign_load_and_imports_nothing(db_url, sink, tmp_path,
                                                                           templates):
    campaign = tmp_path / "evil.yaml"
    text = CAMPAIGN.read_text()
    start = text.index("subject:", text.index("steps:"))
    end = text.index("\n", start)
    campaign.write_text(text[:start] + 'subject: "{{ cycler.__init__.__globals__.os.environ }}"'
                        + text[end:])
    with pytest.raises(ConfigError, match=r"field steps\.0 .*refused by the sandbox"):
        import_leads(db_url, campaign, MAILBOXES, _leads(tmp_path))
    assert rows(db_url, "SELECT id FROM outreach.leads") == []
    assert sink.messages() == []


@pytest.mark.parametrize(("body", "reason"), [
    ("{{ 'a' * 10**8 }}", "'*' would build 100,000,000 characters"),
    ("{% for i in range(10000) %}{{ 'a' * 10000 }}{% endfor %}", "renders more than 1,000,000"),
])
def test_a_100_mb_template_fails_its_row_and_the_batch_goes_on(db_url, sink, settings, tmp_path,
                                                               templates, body, reason):
    # Only Coho Winery's row reaches the branch, so the campaign loads (its sample lead does not).
    _prepend(templates, "{% if lead.company == 'Coho Winery' %}" + body + "{% endif %}")
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, _leads(tmp_path))
    assert r.imported == 5
    queue_due(db_url)
    send_all(db_url, settings)
    messages = sink.messages()
    assert sorted(m["X-RcptTo"] for m in messages) == [f"p{i}@acme{i}.example" for i in range(1, 5)]
    assert max(len(m.as_bytes()) for m in messages) < 20_000
    failed = rows(db_url, "SELECT e.failure_kind, e.last_error, l.email FROM outreach.emails e "
                          "JOIN outreach.leads l ON l.id = e.lead_id WHERE e.status = 'failed'")
    assert [(f["email"], f["failure_kind"]) for f in failed] == [("q@coho.example", "render")]
    assert reason in failed[0]["last_error"]
    assert "template 'ops_intro' (text part): refused by the sandbox" in failed[0]["last_error"]
    invariants.assert_ok(db_url, messages)
