"""The demo's report reads the typed store as it is: its inbound lines name each message's class,
the lead's masked address and the effect (a KeyError there once crashed ``make demo`` at the very
end, after everything had been sent)."""

from __future__ import annotations

import psycopg

from outreach import db
from outreach.dev.demo import inbound_report
from outreach.store import inbound as inbound_store


def test_the_inbound_lines_name_class_masked_address_and_effect(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        assert inbound_report(conn) == [
            "Inbound mail (outreach_inbox): 0 message(s) recorded in outreach.inbound_messages"]
        inbound_id = inbound_store.inbound_insert(
            conn, account="outreach_imap_anna", folder="INBOX", uidvalidity=1, uid=7,
            mailbox_id=None, message_id="reply-1@lead.example", from_address="lead@x.example",
            subject="Re: hello", class_="reply", evidence="In-Reply-To", email_id=None,
            lead_id=None, address="lead@x.example", dsn_status=None, received_at=None)
        assert inbound_id is not None
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outreach.inbound_messages SET effect = 'enrolment 1 stopped: replied' "
                  "WHERE id = %s", (inbound_id,))
    with db.connect(db_url, autocommit=True) as conn:
        lines = inbound_report(conn)
    assert lines == [
        "Inbound mail (outreach_inbox): 1 message(s) recorded in outreach.inbound_messages",
        "  reply (l***@x.example): enrolment 1 stopped: replied"]
    assert "lead@" not in "\n".join(lines)
