"""Rendering and message building: pure functions, no network."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import re

import pytest

from outreach.logutil import mask, mask_addresses
from outreach.message import build_message, message_id_for, to_wire
from outreach.render import RenderError, render
from outreach.settings import Settings, SettingsError
from outreach.tokens import TokenError, make_token, read_token
from outreach.transport import dot_stuff
from support.samples import CTX, URL, envelope


def parse(msg) -> email.message.EmailMessage:
    return email.message_from_bytes(to_wire(msg), policy=email.policy.default)


def test_shipped_templates_render_with_the_unsubscribe_link_in_both_parts():
    r = render("ops_intro", "{{ lead.company }} and late deliveries", CTX)
    assert r.subject == "Acme & Sons and late deliveries"
    assert URL in r.text and URL in r.html
    assert "Acme &amp; Sons" in r.html  # HTML is autoescaped, text is not
    assert "Acme & Sons" in r.text


def test_missing_variable_is_an_error_not_an_empty_string():
    with pytest.raises(RenderError, match="has no attribute 'nickname'"):
        render("ops_intro", "Hi {{ lead.nickname }}", CTX)


def test_template_without_unsubscribe_link_is_refused(tmp_path):
    (tmp_path / "bare.txt.j2").write_text("Hello")
    (tmp_path / "bare.html.j2").write_text("<p>Hello {{ unsubscribe_url }}</p>")
    with pytest.raises(RenderError, match="text part must show"):
        render("bare", "Hi", CTX, directory=tmp_path)


def test_subject_with_newlines_cannot_inject_headers():
    r = render("ops_intro", "Hi {{ lead.first_name }}",
               {**CTX, "lead": {**CTX["lead"], "first_name": "Eve\r\nBcc: all@x.example"}})
    assert "\n" not in r.subject and "\r" not in r.subject
    parsed = parse(build_message(r, envelope(to_name="Eve\r\nBcc: all@x.example")))
    assert parsed["Bcc"] is None
    assert len(parsed.get_all("To")) == 1


def test_message_carries_the_sender_rule_headers():
    r = render("ops_intro", "Subject", CTX)
    parsed = parse(build_message(r, envelope()))
    assert parsed["Message-ID"] == "<6f1c@mail.example>"
    assert parsed["List-Unsubscribe"] == f"<{URL}>, <mailto:unsubscribe@mail.example?subject=u%20{'T' * 120}>"
    assert parsed["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert parsed["Feedback-ID"] == "c:m1:cold:outreach"
    assert parsed["Date"].datetime == dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC)
    assert str(parsed["To"]) == "Zoë O'Neill <zoe@acme.example>"
    assert [p.get_content_type() for p in parsed.iter_parts()] == ["text/plain", "text/html"]
    wire = to_wire(build_message(r, envelope()))
    assert b"=?utf-8?q?=3C" not in wire  # no encoded-words inside List-Unsubscribe
    assert all(len(line) <= 998 for line in wire.split(b"\r\n"))


def test_message_id_is_derived_from_the_idempotency_key_and_idna_domain():
    assert message_id_for("k-1", "anna@bücher.example") == "k-1@xn--bcher-kva.example"


def test_dot_stuffing_and_terminator():
    assert dot_stuff(b"a\r\n.b\r\n..c") == b"a\r\n..b\r\n...c\r\n.\r\n"
    assert dot_stuff(b"x\n.\n") == b"x\r\n..\r\n.\r\n"


def test_unsubscribe_token_round_trip_and_tampering():
    token = make_token("s" * 20, 42)
    assert read_token("s" * 20, token) == 42
    with pytest.raises(TokenError):
        read_token("s" * 20, token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])
    with pytest.raises(TokenError):
        read_token("other-secret-0000000", token)
    with pytest.raises(TokenError) as exc:
        read_token("s" * 20, token, max_age=-1)
    assert exc.value.expired


def test_mask_never_shows_the_local_part():
    assert mask("jane.doe@acme.example") == "j***@acme.example"
    assert mask("nonsense") == "***"
    # A one-character local part would show whole: masked whole.
    assert mask("a@acme.example") == "***@acme.example"
    assert mask_addresses("550 <a@acme.example> unknown") == "550 <***@acme.example> unknown"
    assert mask_addresses("550 5.1.1 <jane.doe@acme.example>: Recipient address rejected; "
                          "see postmaster@mx.acme.example") == \
        "550 5.1.1 <j***@acme.example>: Recipient address rejected; see p***@mx.acme.example"


def test_settings_check_one_handoff_not_a_whole_batch(monkeypatch):
    # The handoff stamp restarts a row's claim age right before MAIL FROM, so the batch size no
    # longer matters: 100 rows × 30 s is fine with a 30-minute reaper ...
    Settings(public_url="https://x.example", unsubscribe_secret="x" * 16, batch_size=100,
             smtp_timeout=30, reaper_minutes=30)
    # ... but one handoff (8 replies × the timeout + 60 s) must fit: 8 × 200 s + 60 s > 27 min.
    with pytest.raises(SettingsError, match="must exceed the longest one SMTP handoff"):
        Settings(public_url="https://x.example", unsubscribe_secret="x" * 16,
                 smtp_timeout=200, reaper_minutes=27)
    with pytest.raises(SettingsError, match="https"):
        Settings(public_url="http://x.example", unsubscribe_secret="x" * 16)
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", "https://x.example")
    monkeypatch.delenv("OUTREACH_UNSUBSCRIBE_SECRET", raising=False)
    with pytest.raises(SettingsError, match="set OUTREACH_UNSUBSCRIBE_SECRET"):
        Settings.from_env()


def test_the_send_gap_settings_have_ranges_and_defaults(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith("OUTREACH_")]:
        monkeypatch.delenv(name)  # the defaults, whatever the test environment sets
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", "https://x.example")
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", "x" * 16)
    s = Settings.from_env()
    assert (s.send_gap_seconds, s.send_gap_jitter) == (60.0, 0.5)  # minutes-scale spacing
    assert s.gap_horizon == dt.timedelta(minutes=15)  # half the reaper threshold
    for name, value in (("OUTREACH_SEND_GAP_SECONDS", "-1"), ("OUTREACH_SEND_GAP_SECONDS", "inf"),
                        ("OUTREACH_SEND_GAP_SECONDS", "nan"), ("OUTREACH_SEND_GAP_JITTER", "2")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            with pytest.raises(SettingsError, match=name):
                Settings.from_env()


# --- bad input: non-ASCII and CR/LF in names, subjects and addresses ---------------------------

from outreach.message import MessageError, envelope_address  # noqa: E402 - this section's imports, kept with its tests


def test_non_ascii_display_names_and_subject_round_trip_as_rfc2047():
    r = render("ops_intro", "Grüße an {{ lead.company }}",
               {**CTX, "lead": {**CTX["lead"], "company": "Müller & Söhne"}})
    msg = build_message(r, envelope(from_name="Jörg Weiß", to_name="Zoë O'Neill-Łukasiewicz"))
    wire = to_wire(msg)
    head = wire.split(b"\r\n\r\n", 1)[0]
    assert head.isascii()  # RFC 5322 headers: non-ASCII only as encoded-words
    parsed = parse(msg)
    assert str(parsed["From"]) == "Jörg Weiß <anna@mail.example>"
    assert parsed["To"].addresses[0].display_name == "Zoë O'Neill-Łukasiewicz"
    assert parsed["Subject"] == "Grüße an Müller & Söhne"


def test_idn_domains_are_idna_encoded_in_headers_and_envelope():
    msg = build_message(render("ops_intro", "S", CTX),
                        envelope(to_address="zoë@bücher.example".replace("zoë", "zoe"),
                                 from_address="anna@bücher-mail.example"))
    parsed = parse(msg)
    assert parsed["To"].addresses[0].domain == "xn--bcher-kva.example"
    assert parsed["From"].addresses[0].domain == "xn--bcher-mail-9db.example"
    assert not re.search(rb"<[^>]*=\?utf-8\?", to_wire(msg))  # no encoded-word inside an address
    assert envelope_address("anna@Bücher.example") == "anna@xn--bcher-kva.example"
    with pytest.raises(MessageError):
        envelope_address("anna@xn--.example.\u0000")


def test_non_ascii_local_part_uses_smtputf8_headers():
    msg = build_message(render("ops_intro", "S", CTX), envelope(to_address="jörg@bücher.example"))
    wire = to_wire(msg)
    assert "To: Zoë O'Neill <jörg@xn--bcher-kva.example>".encode() in wire  # RFC 6532 UTF-8
    parsed = email.message_from_string(wire.decode("utf-8"), policy=email.policy.SMTPUTF8)
    assert parsed["To"].addresses[0].username == "jörg"


@pytest.mark.parametrize("field", ["from_name", "to_name"])
def test_cr_lf_in_names_never_adds_a_header(field):
    evil = "Eve\r\nBcc: all@x.example\r\n\r\nbody"
    parsed = parse(build_message(render("ops_intro", "S", CTX), envelope(**{field: evil})))
    assert parsed["Bcc"] is None and len(parsed.get_all("To")) == 1 and len(parsed.get_all("From")) == 1
    assert [p.get_content_type() for p in parsed.iter_parts()] == ["text/plain", "text/html"]


@pytest.mark.parametrize("address", ["eve\r\nbcc: x@y.example@acme.example", "e ve@acme.example",
                                     "<eve>@acme.example", "eve,bob@acme.example"])
def test_unsafe_addresses_are_refused_not_written(address):
    with pytest.raises(MessageError):
        build_message(render("ops_intro", "S", CTX), envelope(to_address=address))


def test_cr_lf_in_a_domain_is_refused():
    with pytest.raises(MessageError):
        build_message(render("ops_intro", "S", CTX), envelope(to_address="eve@acme.example\r\nBcc: x@y.example"))
    with pytest.raises(MessageError):
        envelope_address("eve@acme.example\r\nRCPT TO:<x@y.example>")
