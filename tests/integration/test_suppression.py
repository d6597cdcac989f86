"""Suppression: the one SQL function decides at all three checkpoints; unsuppress keeps history."""

from __future__ import annotations

import psycopg
import pytest

from outreach import cli, db
from outreach.airflow.connections import smtp_connector
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.send import send_batch
from outreach.suppression import import_suppressions, suppress, unsuppress
from support import invariants
from support.flow import import_demo, leads_csv, rows, scalar, send_all
from support.paths import CAMPAIGN, MAILBOXES

# The rule (outreach.suppressed_addresses, 0139, of which is_suppressed is the one-address form)
# as migration 0001 defined it, plus: "or the address is in test_blocked". Nothing but the rule
# knows about test_blocked, so whatever reacts to it asks the rule.
REPLACE_FUNCTION = """
CREATE TABLE public.test_blocked (address text PRIMARY KEY);
CREATE OR REPLACE FUNCTION outreach.suppressed_addresses(addresses text[], message_class text DEFAULT 'marketing')
RETURNS TABLE (address text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT a.x FROM unnest(addresses) a(x)
    WHERE EXISTS (SELECT 1 FROM public.test_blocked b WHERE b.address = lower(a.x))
        OR EXISTS (
        SELECT 1 FROM outreach.suppressions s
        WHERE (s.kind = 'address' AND s.value = lower(a.x))
           OR (s.kind = 'domain' AND s.value = lower(split_part(a.x, '@', 2))))
$$;
"""


def block(url: str, *addresses: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM public.test_blocked")
        for a in addresses:
            conn.execute("INSERT INTO public.test_blocked VALUES (%s)", (a,))


def lead_steps(url: str, address: str) -> list[str]:
    return [r["s"] for r in rows(url, "SELECT e.status::text AS s FROM outreach.emails e JOIN outreach.leads l"
                                      " ON l.id = e.lead_id WHERE l.email = %s ORDER BY e.id", (address,))]


def test_import_queueing_and_the_pre_send_check_all_ask_the_one_function(db_url, sink, settings):
    with psycopg.connect(db_url) as conn:
        conn.execute(REPLACE_FUNCTION)
    at_import, at_queue, at_send = ("ben.smith@trey-research.example", "ben.garcia@proseware.example",
                                    "anna.tanaka@margies-travel.example")
    # 1. Import: the function says "suppressed", so the lead is counted suppressed, not stored.
    block(db_url, at_import)
    baseline = 11  # the shipped do-not-contact entries
    imported = import_demo(db_url)
    assert imported.suppressed == baseline + 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads WHERE email = %s", (at_import,)) == 0
    # 2. Queueing: a stored, enrolled lead the function now names is not queued.
    block(db_url, at_queue)
    leads = scalar(db_url, "SELECT count(*) FROM outreach.enrollments")
    assert queue_due(db_url)["queued"] == leads - 1
    assert lead_steps(db_url, at_queue) == []
    # 3. Pre-send: a queued row whose address the function now names is claimed, then marked
    # suppressed right before the handoff; nothing reaches the server.
    block(db_url, at_send)
    assert lead_steps(db_url, at_send) == ["queued"]
    summaries = send_all(db_url, settings)
    assert sum(s.suppressed for s in summaries) == 1
    assert lead_steps(db_url, at_send) == ["suppressed"]
    recipients = {m["X-RcptTo"] for m in sink.messages()}
    assert at_send not in recipients and at_queue not in recipients and at_import not in recipients
    # None of the three is in outreach.suppressions: only the function could have stopped them.
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions WHERE value IN (%s, %s, %s)",
                  (at_import, at_queue, at_send)) == 0
    invariants.assert_ok(db_url, sink.messages())


def test_the_function_is_the_only_reader_of_the_suppressions_table():
    """Static guard: no named query decides suppression by reading the table itself."""
    from outreach.db import load_queries

    def statement(sql: str) -> str:
        return "\n".join(ln for ln in sql.splitlines() if not ln.lstrip().startswith("--")).strip()

    readers = {name for name, sql in load_queries().items()
               if "outreach.suppressions" in statement(sql)
               and not statement(sql).upper().startswith(("INSERT", "DELETE"))}
    # Counting suppressions for a mailbox's bounce rate and for the campaign page's funnel and
    # mailbox health is a metric, not a decision about an address: the only readers allowed
    # besides the function (all three are counts in reports; none is asked before a send).
    assert readers == {"mailbox_bounce_counts", "report_funnel", "report_mailbox_health"}, readers


def test_unsuppress_records_who_and_why_and_keeps_the_history(db_url, monkeypatch, capsys):
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    import_demo(db_url)
    queue_due(db_url)
    address = rows(db_url, "SELECT l.email FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id"
                           " ORDER BY e.id LIMIT 1")[0]["email"]
    assert cli.main(["suppress", address, "--reason", "complained", "--by", "ops-sam"]) == 0
    assert "cancelled 1 queued" in capsys.readouterr().out
    assert cli.main(["unsuppress", address, "--reason", "ticket 4711: wrong person", "--by", "ops-jane"]) == 0
    assert "unsuppressed address" in capsys.readouterr().out
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions WHERE value = %s", (address,)) == 0
    history = rows(db_url, "SELECT action, reason, source, actor, note FROM outreach.suppression_events"
                           " WHERE value = %s ORDER BY id", (address,))
    assert history == [
        {"action": "suppress", "reason": "complained", "source": "cli", "actor": "ops-sam", "note": None},
        {"action": "unsuppress", "reason": "complained", "source": "cli", "actor": "ops-jane",
         "note": "ticket 4711: wrong person"},
    ]
    assert lead_steps(db_url, address) == ["suppressed"]  # what it cancelled stays cancelled
    assert cli.main(["unsuppress", address, "--reason", "again"]) == 1  # nothing to remove
    with pytest.raises(SystemExit):
        cli.main(["unsuppress", address])  # a reason is required


def test_unsuppress_of_an_address_under_a_domain_suppression_says_so(db_url):
    with db.transaction(db_url) as conn:
        suppress(conn, "@acme.example", "do-not-contact", "test")
        suppress(conn, "jane@acme.example", "unsubscribed", "test")
        result = unsuppress(conn, "jane@acme.example", actor="ops", note="asked by phone")
    assert result.removed and result.reason == "unsubscribed" and result.still_suppressed
    with db.transaction(db_url) as conn, pytest.raises(ValueError, match="who"):
        unsuppress(conn, "@acme.example", actor=" ", note="x")


def test_a_delete_outside_unsuppress_is_still_recorded(db_url):
    with db.transaction(db_url) as conn:
        suppress(conn, "joe@acme.example", "bounced", "smtp:550 5.1.1")
    with psycopg.connect(db_url) as conn:
        conn.execute("DELETE FROM outreach.suppressions WHERE value = 'joe@acme.example'")
    last = rows(db_url, "SELECT action, actor, note FROM outreach.suppression_events ORDER BY id DESC LIMIT 1")[0]
    assert last["action"] == "unsuppress" and last["actor"] and "without outreach unsuppress" in last["note"]


def test_idn_domain_suppression_matches_leads_however_it_is_written(db_url):
    """Leads keep an internationalised domain in Unicode; a domain suppression written in
    either form must be stored the same way, or the one function would never match it."""
    with db.transaction(db_url) as conn:
        assert suppress(conn, "@XN--BCHER-KVA.example", "do-not-contact", "test")[0]
        assert not suppress(conn, "bücher.example", "do-not-contact", "test")[0]  # the same one
        suppress(conn, "@Straße.example", "do-not-contact", "test")
        assert db.one(conn, "suppression_check", {"address": "anna@bücher.example",
                                                    "message_class": "marketing"})["suppressed"]
        assert db.one(conn, "suppression_check", {"address": "jo@strasse.example",
                                                    "message_class": "marketing"})["suppressed"] is False
    with pytest.raises(ValueError, match="not an address or a domain"):
        from outreach.suppression import parse_entry

        parse_entry("@no-dot")


# ---------------------------------------------------------------------------------------------
# F1: a whole-domain suppression of an IDN domain never matches (send to opted-out)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dnc_entry", ["@bücher.de", "@xn--bcher-kva.de"])
def test_idn_domain_suppression_is_honoured(db_url, sink, settings, tmp_path, dnc_entry):
    dnc = tmp_path / "dnc.csv"
    dnc.write_text(f"email\n{dnc_entry}\n", encoding="utf-8")
    assert import_suppressions(db_url, dnc).added == 1
    r = import_leads(db_url, CAMPAIGN, MAILBOXES,
                     leads_csv(tmp_path, ["jane@bücher.de,Jane,Bücher", "max@xn--bcher-kva.de,Max,Bücher"]))
    queue_due(db_url)
    for mb in (1, 2):
        send_batch(db_url, mb, 50, smtp_connector, settings, worker="atk")
    got = [m["X-RcptTo"] for m in sink.messages()]
    stored = rows(db_url, "SELECT kind, value FROM outreach.suppressions")
    assert got == [], (f"suppressed domain {dnc_entry!r} (stored {stored}) still received {got}; "
                       f"import said suppressed={r.suppressed}")
