"""Every column reaches the templates (issue 14): extra columns are kept per lead and render as
``{{ lead.custom.<name> }}`` in the message the SMTP server receives; a campaign's
``custom_columns`` are checked at import (line and field named); ``columns:`` maps
foreign-language headers; Excel's semicolon / Windows-1252 and UTF-16 exports are read; a file
that does not decode is one clear error and nothing of it is imported."""

from __future__ import annotations

from email.header import decode_header, make_header

import pytest

from outreach.campaign import ConfigError, load_campaign
from outreach.leadfile import ImportFileError
from outreach.leads import import_leads
from outreach.queue import queue_due
from support.flow import rows, scalar, send_all
from support.paths import CAMPAIGN, MAILBOXES

TEXT = ("Hallo {{ lead.first_name }},\n\nin {{ lead.custom.city }}: {{ lead.custom.pain_point }}\n\n"
        "{{ unsubscribe_url }}\n")
HTML = ("<p>Hallo {{ lead.first_name }}, {{ lead.custom.city }}</p>"
        "<p>{{ lead.custom.pain_point }}</p><a href=\"{{ unsubscribe_url }}\">abmelden</a>\n")
HEAD = CAMPAIGN.read_text().split("steps:")[0].replace("key: q4-ops-intro", "key: custom-test")
MAPPING = "columns:\n  E-Mail: email\n  Vorname: first_name\n  Firma: company\n  Stadt: city\n"


@pytest.fixture
def campaign(tmp_path, monkeypatch):
    """A campaign whose subject and bodies use custom columns ``city`` and ``pain_point``,
    declared, with German headers mapped."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "local.txt.j2").write_text(TEXT)
    (templates / "local.html.j2").write_text(HTML)
    monkeypatch.setenv("OUTREACH_TEMPLATES", str(templates))
    path = tmp_path / "custom.yaml"
    path.write_text(HEAD + "custom_columns: [city, pain_point]\n" + MAPPING +
                    'steps:\n  - template: local\n    subject: "{{ lead.custom.city }} und {{ lead.company }}"\n'
                    "    delay_days: 0\n")
    return path


def body(msg, subtype: str) -> str:
    return "".join(p.get_payload(decode=True).decode(p.get_content_charset())
                   for p in msg.walk() if p.get_content_type() == f"text/{subtype}")


GERMAN = ("E-Mail;Vorname;Firma;Stadt;Pain Point;Branche\r\n"
          "jörg@müller.example;Jörg;Müller & Söhne;München;Lieferungen <b>zu spät</b>;Logistik\r\n"
          "anna@beta.example;Anna;Beta AG;Köln;Retouren – teuer;Handel\r\n")


def test_custom_columns_of_a_semicolon_cp1252_export_render_in_the_sent_message(
        db_url, sink, settings, tmp_path, campaign):
    leads = tmp_path / "excel.csv"
    leads.write_bytes(GERMAN.encode("cp1252"))  # Excel "CSV (semicolon)" on a German Windows
    result = import_leads(db_url, campaign, MAILBOXES, leads)
    assert (result.imported, result.invalid) == (2, 0), result.problems
    assert rows(db_url, "SELECT custom FROM outreach.leads WHERE email = 'anna@beta.example'") == [
        {"custom": {"city": "Köln", "pain_point": "Retouren – teuer", "branche": "Handel"}}]
    assert queue_due(db_url)["queued"] == 2
    send_all(db_url, settings)
    by_to = {m["X-RcptTo"]: m for m in sink.messages()}
    assert len(by_to) == 2
    anna = by_to["anna@beta.example"]
    assert str(make_header(decode_header(anna["Subject"]))) == "Köln und Beta AG"
    assert "in Köln: Retouren – teuer" in body(anna, "plain")
    joerg = next(m for to, m in by_to.items() if to != "anna@beta.example")
    assert "in München: Lieferungen <b>zu spät</b>" in body(joerg, "plain")
    # The HTML part autoescapes lead data: markup in a column stays text.
    assert "Lieferungen &lt;b&gt;zu spät&lt;/b&gt;" in body(joerg, "html")
    assert "<b>" not in body(joerg, "html")


def test_utf16_tab_export_imports(db_url, tmp_path, campaign):
    leads = tmp_path / "unicode.txt"  # Excel "Unicode Text": UTF-16 LE with BOM, tab-separated
    leads.write_bytes(GERMAN.replace(";", "\t").encode("utf-16"))
    result = import_leads(db_url, campaign, MAILBOXES, leads)
    assert (result.imported, result.invalid) == (2, 0), result.problems
    assert scalar(db_url, "SELECT custom->>'city' FROM outreach.leads WHERE first_name = 'Jörg'") == "München"


def test_utf8_bom_comma_export_imports(db_url, tmp_path, campaign):
    leads = tmp_path / "bom.csv"
    leads.write_bytes(b"\xef\xbb\xbf" + GERMAN.replace(";", ",").replace("Müller & Söhne", '"Müller, Söhne"').encode())
    result = import_leads(db_url, campaign, MAILBOXES, leads)
    assert (result.imported, result.invalid) == (2, 0), result.problems
    assert scalar(db_url, "SELECT company FROM outreach.leads WHERE first_name = 'Jörg'") == "Müller, Söhne"


def test_a_missing_declared_column_is_an_import_problem_with_line_and_field(db_url, tmp_path, campaign):
    no_column = tmp_path / "nocity.csv"
    no_column.write_text("E-Mail;Vorname;Firma;Pain Point\na@x.example;A;X;late\n", encoding="utf-8")
    with pytest.raises(ImportFileError, match=r"nocity\.csv, line 1, field city: a column the "
                                              r"campaign needs \(custom_columns\) is not in the header"):
        import_leads(db_url, campaign, MAILBOXES, no_column)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0

    blank = tmp_path / "blank.csv"
    blank.write_text("E-Mail;Vorname;Firma;Stadt;Pain Point\na@x.example;A;X;Bonn;late\n"
                     "b@x.example;B;X;;late\n", encoding="utf-8")
    result = import_leads(db_url, campaign, MAILBOXES, blank)
    assert result.imported == 1
    assert [str(p) for p in result.problems] == [
        "line 3, field city: empty (the campaign needs it: custom_columns) (row skipped)"]


def test_a_template_using_an_undeclared_custom_column_is_refused(tmp_path, campaign):
    bad = tmp_path / "undeclared.yaml"
    bad.write_text(campaign.read_text().replace("custom_columns: [city, pain_point]\n",
                                                "custom_columns: [city]\n"))
    with pytest.raises(ConfigError, match=r"undeclared\.yaml, field steps\.0 .*pain_point.*"
                                          r"list it under custom_columns"):
        load_campaign(bad)


def test_custom_values_in_a_subject_are_held_to_the_header_rule_body_only_ones_are_not(
        db_url, tmp_path, campaign):
    word = "=?utf-8?q?Bonn=0D=0ABcc:_x@evil.example?="
    leads = tmp_path / "hostile.csv"
    leads.write_text("E-Mail;Vorname;Firma;Stadt;Pain Point\n"
                     f"a@x.example;A;X;{word};late\n"      # city is in the subject: refused
                     f"b@x.example;B;X;Bonn;{word}\n",     # pain_point only in bodies: kept
                     encoding="utf-8")
    result = import_leads(db_url, campaign, MAILBOXES, leads)
    assert result.imported == 1
    assert len(result.problems) == 1
    p = result.problems[0]
    assert (p.line, p.field) == (2, "city") and "not allowed in a header (a subject uses it)" in p.reason


def test_an_oversized_custom_value_names_line_and_field(db_url, tmp_path, campaign):
    leads = tmp_path / "big.csv"
    leads.write_text("E-Mail;Vorname;Firma;Stadt;Pain Point\n"
                     f"a@x.example;A;X;Bonn;{'x' * 1001}\nb@x.example;B;X;Bonn;ok\n", encoding="utf-8")
    result = import_leads(db_url, campaign, MAILBOXES, leads)
    assert result.imported == 1
    assert [str(p) for p in result.problems] == [
        "line 2, field pain_point: longer than 1000 characters (row skipped)"]


def test_an_undecodable_file_is_one_error_and_nothing_is_imported(db_url, tmp_path, campaign):
    bad = tmp_path / "broken.csv"
    # Not UTF-8 and not Windows-1252 either (0x81 is unassigned there).
    bad.write_bytes("E-Mail;Vorname;Firma;Stadt;Pain Point\na@x.example;Jörg;X;Bonn;late\n".encode("cp1252")
                    + b"b@x.example;B\x81;X;Bonn;late\n")
    with pytest.raises(ImportFileError, match=r"broken\.csv, line 3: not Windows-1252 \(byte 0x81\)"):
        import_leads(db_url, campaign, MAILBOXES, bad)
    # UTF-8 for the first 64 KiB (so read as UTF-8), a bad byte much later: the rows before it
    # were already staged; the transaction is rolled back, nothing is half-imported.
    late = tmp_path / "late.csv"
    good = "".join(f"u{i}@x.example;U;X;Bonn;late\n" for i in range(3000))
    late.write_bytes(("E-Mail;Vorname;Firma;Stadt;Pain Point\n" + good).encode() + b"z@x.example;\xff;X;Bonn;late\n")
    with pytest.raises(ImportFileError, match=r"late\.csv, line 3002: not UTF-8 \(byte 0xff\); .*"
                                              r"nothing was imported"):
        import_leads(db_url, campaign, MAILBOXES, late)
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads") == 0
    assert scalar(db_url, "SELECT count(*) FROM outreach.import_runs") == 0
