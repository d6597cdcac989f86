"""Header injection through RFC 2047 encoded words (issue 12, item 1).

An encoded word is printable ASCII, but the email package decodes it when a header is set, and
interpreters without the CVE-2024-6923 fix (this machine's 3.11.7) write a decoded CR LF as a real
header line. The rule (outreach.message.header_text_problem) is applied at import and at build,
and every built message is parsed back from its own bytes.
"""

from __future__ import annotations

import email
import email.policy

import pytest

from outreach import message
from outreach.leads import import_leads
from outreach.message import MessageError, build_message, header_text_problem, to_wire
from outreach.queue import queue_due
from outreach.render import render
from support.flow import leads_csv, rows, send_all
from support.paths import CAMPAIGN, MAILBOXES
from support.samples import CTX, envelope

BCC_Q = "=?utf-8?q?Acme=0D=0ABcc:_x@evil.example?="
BCC_B = "=?utf-8?b?QWNtZQ0KQmNjOiB4QGV2aWwuZXhhbXBsZQ==?="          # "Acme\r\nBcc: x@evil.example"
REPLY_TO = "=?UTF-8?Q?Pat=0AReply-To:_x@evil.example?="
HOSTILE = [BCC_Q, BCC_B, REPLY_TO,
           "=?iso-8859-1?q?A=0D=0ABcc:_x@evil.example?=",                 # another charset
           "=?x-unknown?q?A=0D=0ABcc:_x@evil.example?=",                  # an unknown charset
           "=?utf-8?b?QQ0KQmNjOiB4QGV2aWwuZXhhbXBsZQ?=",                  # base64 without padding
           "=?utf-8?q?A=00B?=", "=?utf-8?q?A=C2=85B?=", "=?utf-8?q?A=E2=80=A8B?=",  # NUL, NEL, U+2028
           "Acme\x7fCorp", "Acme\x01"]


@pytest.mark.parametrize("value", HOSTILE)
def test_the_rule_refuses_controls_in_text_and_in_decoded_encoded_words(value):
    assert header_text_problem(value) is not None
    assert header_text_problem(f"Hi {value} there") is not None


@pytest.mark.parametrize("value", ["Acme & Sons", "Müller GmbH", "=?utf-8?q?M=C3=BCller?=", "a=?b",
                                   "Zoë O'Neill-Łukasiewicz", "50% off?="])
def test_the_rule_accepts_printable_text(value):
    assert header_text_problem(value) is None


@pytest.mark.parametrize("value", [BCC_Q, BCC_B, REPLY_TO])
def test_build_refuses_a_subject_or_display_name_that_decodes_to_a_line_break(value):
    ctx = {**CTX, "lead": {**CTX["lead"], "company": value}}
    with pytest.raises(MessageError, match="header Subject: control character U\\+000"):
        build_message(render("ops_intro", "{{ lead.company }} and late deliveries", ctx), envelope())
    with pytest.raises(MessageError, match="header To: control character"):
        build_message(render("ops_intro", "S", CTX), envelope(to_name=f"Pat {value}"))


def test_the_wire_check_alone_refuses_an_injected_header(monkeypatch):
    # With the character rule switched off, the parse-back of the message's own bytes still
    # catches the Bcc that an email package without the CVE-2024-6923 fix (no
    # verify_generated_headers, like this machine's 3.11.7) writes. A fixed package encodes the
    # line break or refuses to write it: either way no header is injected.
    monkeypatch.setattr(message, "header_text_problem", lambda text: None)
    ctx = {**CTX, "lead": {**CTX["lead"], "company": BCC_Q}}
    msg = build_message(render("ops_intro", "{{ lead.company }} and late deliveries", ctx), envelope())
    if not hasattr(email.policy.SMTP, "verify_generated_headers"):
        with pytest.raises(MessageError, match="written message does not have the headers"):
            to_wire(msg)
        return
    try:
        wire = to_wire(msg)
    except MessageError:
        return
    parsed = email.message_from_bytes(wire, policy=email.policy.SMTP)
    assert parsed["Bcc"] is None and parsed["Subject"].startswith("Acme")


def test_a_message_that_round_trips_is_returned_unchanged():
    msg = build_message(render("ops_intro", "=?utf-8?q?M=C3=BCller?= news", CTX), envelope())
    wire = to_wire(msg)
    assert email.message_from_bytes(wire, policy=email.policy.SMTP)["Subject"] == "Müller news"


INTENDED = ["From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe",
            "List-Unsubscribe-Post", "Feedback-ID", "X-Outreach-Step", "MIME-Version",
            "Content-Type"]


def test_hostile_leads_are_refused_at_import_and_at_build_and_never_inject(db_url, sink, settings,
                                                                          tmp_path):
    path = leads_csv(tmp_path, [
        "good1@acme.example,Ann,Acme,Ops",
        f"evil1@acme.example,Eve,{BCC_Q},Ops",               # line 3: company
        f"evil2@acme.example,Eve,Acme,{BCC_B}",              # line 4: title
        "=?utf-8?q?=0D=0A?=@acme.example,Eve,Acme,Ops",     # line 5: the address itself
        "good2@acme.example,Bob,Beta,Ops",
        "good3@acme.example,Cy,Gamma,Ops",
    ])
    path.write_text(path.read_text().replace("Email,First Name,Company\n",
                                             "Email,First Name,Company,Title\n"))
    r = import_leads(db_url, CAMPAIGN, MAILBOXES, path)
    assert (r.imported, r.invalid) == (3, 3)
    assert [(p.line, p.field, p.action) for p in r.problems] == [(3, "company", "skipped"),
                                                                 (4, "title", "skipped"),
                                                                 (5, "email", "skipped")]
    assert all("control character U+000D after decoding the encoded word" in p.reason
               for p in r.problems)

    # A lead that reached the table another way (an import before this rule, psql): the builder
    # fails that one row at stage RENDER and sends the others.
    with __import__("psycopg").connect(db_url) as c:
        c.execute("UPDATE outreach.leads SET company = %s, last_name = %s "
                  "WHERE email = 'good3@acme.example'", (BCC_Q, REPLY_TO))
    assert queue_due(db_url)["queued"] == 3
    summaries = send_all(db_url, settings)
    assert sum(s.sent for s in summaries) == 2 and sum(s.failed for s in summaries) == 1

    received = sink.messages()
    assert sorted(m["X-RcptTo"] for m in received) == ["good1@acme.example", "good2@acme.example"]
    for m in received:
        # exactly the intended headers (plus what the sink itself adds), each once
        assert [k for k in m.keys() if not k.startswith(("X-MailFrom", "X-RcptTo", "X-Peer"))] \
            == INTENDED
        assert m["Bcc"] is None and m["Reply-To"] is None
    subjects = sorted(m["Subject"] for m in received)
    assert subjects == ["Acme and late deliveries", "Beta and late deliveries"]

    failed = rows(db_url, "SELECT e.status, e.last_error FROM outreach.emails e "
                          "JOIN outreach.leads l ON l.id = e.lead_id "
                          "WHERE l.email = 'good3@acme.example'")
    assert failed[0]["status"] == "failed"
    assert failed[0]["last_error"].startswith("RENDER header ")
    assert "control character U+000" in failed[0]["last_error"]


def test_transactional_enqueue_refuses_a_context_whose_subject_breaks_the_rule():
    from outreach.transactional import TransactionalError, validate_request

    with pytest.raises(TransactionalError, match="context: the subject would hold a control"):
        validate_request("k-1", "new@acme.example", "welcome",
                         {"user": {"name": BCC_Q}, "verify_url": "https://app.example/v"})
    validate_request("k-1", "new@acme.example", "welcome",
                     {"user": {"name": "Pat"}, "verify_url": "https://app.example/v"})
