"""Header problems are decided once, at import, by the rule the message builder applies (issue 31,
item 6): values that pass the header rule one by one but together form an RFC 2047 encoded word
that decodes to a line break — two name fields in the To display name, a field and the subject's
own text — are refused at import with file, line and field, never queued; the builder refuses
the same headers with the same words (outreach.message.lead_header_problem)."""

from __future__ import annotations

import pytest

from outreach.leads import import_leads
from outreach.message import MessageError, build_message, lead_header_problem, recipient_name
from outreach.queue import queue_due
from outreach.render import render
from support import invariants
from support.flow import rows, send_all
from support.paths import CAMPAIGN, MAILBOXES
from support.samples import CTX, envelope

FIRST, LAST = "=?utf-8?q?Pat=0D", "=0ABcc:_x@evil.example?="   # each passes header_text_problem
COMPANY = "=?utf-8?q?Acme=0D=0ABcc:_x@evil.example"            # closed by a subject's "?="


def _csv(tmp_path, lines):
    p = tmp_path / "leads.csv"
    p.write_text("Email,First Name,Last Name,Company\n" + "".join(f"{ln}\n" for ln in lines),
                 encoding="utf-8")
    return p


def test_the_rule_at_import_is_the_builders():
    """The builder refuses what lead_header_problem names, in the same words."""
    name = recipient_name(FIRST, LAST)
    why = lead_header_problem("eve@acme.example", name, ["Hello"])
    assert why is not None and why.startswith("header To: control character U+000D after decoding")
    with pytest.raises(MessageError) as exc:
        build_message(render("ops_intro", "Hello", CTX), envelope(to_name=name))
    assert str(exc.value).startswith(why)
    assert lead_header_problem("eve@acme.example", "Pat Lee", ["Hello"]) is None


def test_names_that_combine_into_a_line_break_are_refused_at_import(db_url, sink, settings,
                                                                    tmp_path):
    path = _csv(tmp_path, ["ann@acme.example,Ann,Lee,Acme",
                           f"eve@acme.example,{FIRST},{LAST},Acme",   # line 3
                           "bob@beta.example,Bob,Ray,Beta",
                           "q@acme.example,Q?,=Equal,Acme"])          # '=' and '?' alone: fine
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert (r.imported, r.invalid) == (3, 1)
    [p] = r.problems
    assert (p.line, p.field, p.action) == (3, "first_name", "skipped")
    assert p.reason.startswith("header To: control character U+000D after decoding the encoded word")
    assert f"{path}, line 3, field first_name: header To:" in f"{path}, {p}"
    assert rows(db_url, "SELECT id FROM outreach.leads WHERE email = 'eve@acme.example'") == []
    assert queue_due(db_url)["queued"] == 3
    send_all(db_url, settings)
    received = sink.messages()
    assert sorted(m["X-RcptTo"] for m in received) == ["ann@acme.example", "bob@beta.example",
                                                      "q@acme.example"]
    assert rows(db_url, "SELECT id FROM outreach.emails WHERE status = 'failed'") == []
    invariants.assert_ok(db_url, received)


def test_a_field_and_the_subjects_text_that_combine_are_refused_at_import(db_url, tmp_path):
    campaign = tmp_path / "odd.yaml"
    campaign.write_text(CAMPAIGN.read_text().replace(
        'subject: "{{ lead.company }} and late deliveries"', 'subject: "{{ lead.company }}?= news"'))
    path = _csv(tmp_path, ["ann@acme.example,Ann,Lee,Acme", f"eve@acme.example,Eve,Lee,{COMPANY}"])
    r = import_leads(db_url, campaign, MAILBOXES, path)
    assert (r.imported, r.invalid) == (1, 1)
    [p] = r.problems
    assert (p.line, p.field) == (3, "company")
    assert p.reason.startswith("header Subject: control character U+000D")
    assert queue_due(db_url)["queued"] == 1
