"""The campaign page's preview (issue 24, item 2): for a chosen lead it shows exactly what
``outreach campaign preview`` prints (:func:`outreach.preview.item_text`), the text part byte for
byte, the HTML part only inside a sandboxed iframe's ``srcdoc`` under a CSP that loads nothing;
hostile lead data never becomes markup; without a lead it lists the first leads with the reason a
step would skip them. Real PostgreSQL, the page's real FastAPI app (the browser test is
tests/integration/test_campaign_page_browser.py)."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
from html.parser import HTMLParser

import psycopg
from fastapi.testclient import TestClient

from outreach import db
from outreach.preview import display_header, item_readable, item_text, preview
from outreach.suppression import suppress
from outreach.web.campaign_page import FRAME_CSP, PREVIEW_SAMPLE, create_app
from support.flow import import_demo

AT = dt.datetime(2026, 3, 10, 8, 0, 7, tzinfo=dt.UTC)
HOSTILE_NAME = "<script>document.title='ran'</script>"
HOSTILE_COMPANY = '"><img src=x onerror="document.title=\'ran\'">'


class Tags(HTMLParser):
    """Every start tag of a page with its attributes, and the text inside each ``<pre>`` by
    class (entities decoded, as a browser shows it)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.pre: dict[str, list[str]] = {}
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "pre":
            self._in = dict(attrs).get("class") or ""
            self.pre.setdefault(self._in, []).append("")

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self.pre[self._in][-1] += data


def _hostile_lead(db_url: str) -> str:
    with psycopg.connect(db_url) as conn:
        address = conn.execute(
            "SELECT l.email FROM outreach.leads l JOIN outreach.enrollments en "
            "ON en.lead_id = l.id ORDER BY l.id LIMIT 1").fetchone()[0]
        conn.execute("UPDATE outreach.leads SET first_name = %s, company = %s WHERE email = %s",
                     (HOSTILE_NAME, HOSTILE_COMPANY, address))
    return address


def _client(db_url: str, settings) -> TestClient:
    return TestClient(create_app(lambda: db_url, settings=lambda: settings, clock=lambda: AT))


def test_the_preview_of_a_hostile_lead_is_escaped_sandboxed_and_equal_to_the_cli(
        db_url, settings):
    import_demo(db_url)
    address = _hostile_lead(db_url)
    r = _client(db_url, settings).get("/preview", params={
        "campaign": "q4-ops-intro", "lead": address, "step": "1"})
    assert r.status_code == 200, r.text
    assert r.headers["content-security-policy"].startswith("default-src 'none'; img-src data:;")
    page = Tags()
    page.feed(r.text)
    # Nothing of the lead became markup: only the page's own tags, no event handler, no script.
    assert {t for t, _ in page.tags} <= {
        "html", "head", "meta", "title", "link", "body", "h1", "h2", "h3", "h4", "p", "a", "form",
        "label", "select", "option", "input", "button", "section", "table", "tr", "th", "td",
        "pre", "iframe", "details", "summary", "code"}, {t for t, _ in page.tags}
    assert not [a for _, attrs in page.tags for a in attrs if a.startswith("on")]
    frames = [attrs for t, attrs in page.tags if t == "iframe"]
    assert len(frames) == 1
    frame = frames[0]
    assert frame["sandbox"] == ""  # no allow-scripts, no allow-same-origin: nothing runs
    assert frame["srcdoc"].startswith(
        f'<meta http-equiv="Content-Security-Policy" content="{FRAME_CSP}">')

    item = preview(db_url, "q4-ops-intro", settings, address=address, now=AT)[0]
    msg = email.message_from_bytes(item.wire, policy=email.policy.default)
    # The shown text part and the whole CLI output are preview.py's, byte for byte (LF line
    # ends, as the CLI prints them).
    text_part = msg.get_body(("plain",)).get_content().replace("\r\n", "\n")
    assert page.pre["text-part"][0].encode() == text_part.encode()
    assert page.pre["cli"][0].encode() == item_text(item, 1)
    assert HOSTILE_NAME in page.pre["text-part"][0]  # shown as text, as the lead will read it
    # The HTML part reaches the iframe as the message holds it (its own escaping kept).
    html_part = msg.get_body(("html",)).get_content().replace("\r\n", "\n")
    assert frame["srcdoc"].endswith(html_part)
    assert "Hi &lt;script&gt;document.title=" in html_part and "<script" not in html_part
    shown = r.text
    for header in ("List-Unsubscribe", "Message-ID", "List-Unsubscribe-Post"):
        assert f"<tr><th>{header}</th>" in shown, header


def test_without_a_lead_the_preview_lists_sample_leads_with_skip_reasons(db_url, settings):
    import_demo(db_url)
    with psycopg.connect(db_url) as conn:
        second = conn.execute(
            "SELECT l.email FROM outreach.leads l JOIN outreach.enrollments en "
            "ON en.lead_id = l.id ORDER BY l.id OFFSET 1 LIMIT 1").fetchone()[0]
    with db.connect(db_url) as conn:
        suppress(conn, second, "unsubscribed", "test")
        conn.commit()
    client = _client(db_url, settings)
    front = client.get("/")
    assert '<form id="preview-form" method="get" action="/preview">' in front.text
    assert '<option value="q4-ops-intro">q4-ops-intro</option>' in front.text
    r = client.get("/preview", params={"campaign": "q4-ops-intro"})
    assert r.status_code == 200
    assert r.text.count('<section class="preview-item"') == PREVIEW_SAMPLE
    assert (f'<section class="preview-item" data-address="{second}"><h3><a href="/preview?'
            f'campaign=q4-ops-intro&amp;step=1&amp;lead={second.replace("@", "%40")}">'
            f'{second}</a>: skipped</h3><p class="skip">suppressed (outreach.is_suppressed)</p>'
            ) in r.text
    missing = client.get("/preview", params={"campaign": "q4-ops-intro",
                                             "lead": "<b>nobody</b>@x.example"})
    assert missing.status_code == 404
    assert "&lt;b&gt;nobody&lt;/b&gt;@x.example" in missing.text and "<b>" not in missing.text
    assert client.get("/preview", params={"campaign": "nope"}).status_code == 404
    with psycopg.connect(db_url) as conn:  # a message that cannot be built: said, not a 500
        first = conn.execute(
            "UPDATE outreach.leads SET company = 'Bell\x07Co' WHERE id = (SELECT min(lead_id) "
            "FROM outreach.enrollments) RETURNING email").fetchone()[0]
    broken = client.get("/preview", params={"campaign": "q4-ops-intro", "lead": first})
    assert broken.status_code == 422, broken.text
    assert "the message cannot be built: " in broken.text


def test_header_fields_are_shown_decoded_and_inert(db_url, settings):
    """The To field of Amélie Dubois is an RFC 2047 encoded word on the wire; the page shows it
    as her mail reader does, escaped, and a decoded line break never reads as another field."""
    import_demo(db_url)
    address = "amelie.dubois@contoso-freight.example"
    item = preview(db_url, "q4-ops-intro", settings, address=address, now=AT)[0]
    assert b"To: =?utf-8?q?Am=C3=A9lie?= Dubois <" in item.wire
    r = _client(db_url, settings).get("/preview", params={
        "campaign": "q4-ops-intro", "lead": address, "step": "1"})
    assert r.status_code == 200, r.text
    assert f"<tr><th>To</th><td>Amélie Dubois &lt;{address}&gt;</td></tr>" in r.text
    assert "=?utf-8?" not in r.text.partition('<table class="headers">')[2].partition(
        "</table>")[0]
    assert display_header("Subject", "=?utf-8?q?Acme=0D=0ABcc:_x@evil.example?=") == \
        "Acme\\x0d\\x0aBcc: x@evil.example"


def test_the_terminal_preview_is_readable_and_inert(db_url, settings):
    """``outreach campaign preview`` prints headers decoded and the text part as the lead reads
    it; a terminal escape in lead data is printed as an escape, never sent to the terminal.
    ``--raw`` keeps the wire form (:func:`outreach.preview.item_text`)."""
    import_demo(db_url)
    address = "amelie.dubois@contoso-freight.example"
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.leads SET title = %s WHERE email = %s",
                     ("COO\x1b]0;owned\x07", address))
    item = preview(db_url, "q4-ops-intro", settings, address=address, now=AT)[0]
    shown = item_readable(item, 1)
    assert shown.startswith(f"=== step 1 to {address}: Message-ID <{item.message_id}>\n")
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\n" in shown
    text = shown.partition("\n--- text part\n")[2]
    assert "As COO\\x1b]0;owned\\x07, would" in text
    assert "\nTo: Am\N{LATIN SMALL LETTER E WITH ACUTE}lie Dubois <" in shown
    assert "=C3=A9" not in text and "Content-Transfer-Encoding" not in text
    assert "\n--- HTML part: " in text
    assert b"Content-Transfer-Encoding" in item_text(item, 1)  # --raw: the wire form
    # An address written into the database by hand, past the import's check: escaped too.
    from outreach.preview import PreviewItem

    odd = PreviewItem("a\x1b]0;x\x07@b.example", "suppressed (manual)", None, None)
    assert item_readable(odd, 1) == item_text(odd, 1).decode() == (
        "=== step 1 to a\\x1b]0;x\\x07@b.example: SKIPPED: suppressed (manual)\n")
