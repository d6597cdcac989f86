"""Bad input through a full send (real PostgreSQL, real aiosmtpd): CR/LF injection attempts,
non-ASCII names, IDN domains and a non-ASCII local part."""

from __future__ import annotations

import email
import email.policy

import psycopg

from outreach.airflow.connections import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.send import send_batch
from support import invariants
from support.flow import leads_csv, rows, send_all
from support.paths import CAMPAIGN, MAILBOXES

CSV = (
    "Email,First Name,Last Name,Company Name\r\n"
    "anna@bücher.example,Änne,Weiß,Bücherstube\r\n"                          # IDN domain
    "jörg@münchen.example,Jörg,Groß,Brauerei\r\n"                           # non-ASCII local part
    '"eve@acme.example","Eve\r\nBcc: victim@evil.example","X","Acme\r\nBcc: v2@evil.example"\r\n'
    "plain@acme.example,Plain,Person,Acme\r\n"
)


def raw_messages(sink) -> dict[str, email.message.EmailMessage]:
    """Stored messages by envelope recipient, parsed from the bytes as received (UTF-8 aware)."""
    out = {}
    for path in sorted((sink.maildir / "new").iterdir()):
        msg = email.message_from_string(path.read_bytes().decode("utf-8"), policy=email.policy.default)
        out[msg["X-RcptTo"]] = msg
    return out


def test_injection_attempts_and_international_addresses_through_a_full_send(db_url, sink, settings,
                                                                            tmp_path):
    leads = tmp_path / "leads.csv"
    leads.write_bytes(CSV.encode("utf-8"))
    result = import_leads(db_url, CAMPAIGN, MAILBOXES, leads)
    assert (result.imported, result.invalid) == (4, 0), result.problems
    # A lead whose fields reached the table another way (an API, a script) still holds CR/LF.
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.leads SET first_name = %s, company = %s WHERE email = %s",
                     ("Eve\r\nBcc: victim@evil.example\r\n", "Acme\nBcc: v3@evil.example",
                      "plain@acme.example"))
    queue_due(db_url)
    send_all(db_url, settings)
    stored = raw_messages(sink)
    # Exactly one envelope recipient per lead, and none of the injected ones.
    assert set(stored) == {"anna@xn--bcher-kva.example", "jörg@xn--mnchen-3ya.example",
                           "eve@acme.example", "plain@acme.example"}
    for rcpt, msg in stored.items():
        assert msg["Bcc"] is None, rcpt
        assert len(msg.get_all("To")) == 1 and len(msg.get_all("Subject")) == 1, rcpt
        assert "\n" not in msg["Subject"] and "\r" not in msg["Subject"]
        assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    assert stored["plain@acme.example"]["Subject"] == "Acme Bcc: v3@evil.example and late deliveries"
    assert str(stored["plain@acme.example"]["To"]) == '"Eve Bcc: victim@evil.example Person" <plain@acme.example>'
    idn = stored["anna@xn--bcher-kva.example"]
    assert str(idn["To"]) == "Änne Weiß <anna@xn--bcher-kva.example>"
    assert idn["Subject"] == "Bücherstube and late deliveries"
    utf8 = stored["jörg@xn--mnchen-3ya.example"]
    assert utf8["To"].addresses[0].username == "jörg"
    assert all(r["s"] == "sent" for r in rows(db_url, "SELECT status::text AS s FROM outreach.emails"))
    invariants.assert_ok(db_url, sink.messages())


# ---------------------------------------------------------------------------------------------
# F7: a typo in a step's subject passes campaign validation; every due email of the step then
#     fails permanently ('render'), and fixing the file never brings them back
# ---------------------------------------------------------------------------------------------

def test_subject_typo_is_refused_or_recoverable(db_url, sink, settings, tmp_path):
    text = CAMPAIGN.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace('"{{ lead.company }} and late deliveries"', '"{{ lead.compnay }} and late deliveries"'))
    good = tmp_path / "good.yaml"
    good.write_text(text)
    leads = leads_csv(tmp_path, [f"t{i}@ex.example,T,Typo" for i in range(4)])
    try:
        import_leads(db_url, bad, MAILBOXES, leads)
    except Exception:  # noqa: BLE001 - refusing the file is a fine outcome
        return
    queue_due(db_url)
    for mb in (1, 2):
        send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk")
    # the operator fixes the campaign file and re-runs everything
    import_leads(db_url, good, MAILBOXES, leads)
    queue_due(db_url)
    for mb in (1, 2):
        send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk")
    st = rows(db_url, "SELECT status::text AS s, failure_kind, last_error FROM outreach.emails")
    assert len(sink.messages()) == 4, st
