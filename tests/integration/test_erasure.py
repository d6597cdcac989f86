"""Erasure (GDPR Art. 17) at real PostgreSQL, through the CLI entry point: after ``outreach lead
erase`` no table holds the address or the name (every column of every outreach table is read,
so a new table cannot escape), and the keyed hash refuses the address at import, queueing and
the handoff; a second erasure is harmless; without the key it fails with one line, and the
suppression rule fails closed."""

from __future__ import annotations

import hashlib
import hmac
import json

import psycopg
import pytest

from outreach import cli, db
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.suppression import suppress
from support.flow import leads_csv, one_mailbox, rows, scalar, send_all
from support.paths import CAMPAIGN, MAILBOXES

ADDRESS = "zenobia.quillfeather@proseware.example"
NEEDLES = (ADDRESS, "zenobia", "quillfeather")
KEY = "test-erasure-key-0123456789abcdef-0123"


def _holders(url: str) -> dict[str, int]:
    """Every outreach table with the number of its rows whose text (every column, as the row is
    written out) holds one of NEEDLES."""
    out = {}
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'outreach' AND table_type = 'BASE TABLE' ORDER BY 1")]
        assert len(tables) > 25
        for t in tables:
            n = conn.execute(
                f"SELECT count(*) FROM outreach.{t} x WHERE "  # table names from the catalog
                + " OR ".join("strpos(lower(x::text), %s) > 0" for _ in NEEDLES), NEEDLES).fetchone()[0]
            if n:
                out[t] = n
    return out


def _seed(url: str, tmp_path, sink, settings) -> tuple:
    csv = leads_csv(tmp_path, [f"{ADDRESS},Zenobia,Quillfeather Freight",
                               "other.person@proseware.example,Olu,Other Ltd"])
    assert import_leads(url, CAMPAIGN, MAILBOXES, csv).imported == 2
    one_mailbox(url)
    with psycopg.connect(url) as c:
        c.execute("UPDATE outreach.campaigns SET send_days = '{1,2,3,4,5,6,7}',"
                  " window_start = '00:00', window_end = '24:00'")
    queue_due(url)
    send_all(url, settings)  # the rendered subject ("Quillfeather Freight and …") is logged
    lead_id = scalar(url, "SELECT id FROM outreach.leads WHERE email = %s", (ADDRESS,))
    email_id = scalar(url, "SELECT id FROM outreach.emails WHERE lead_id = %s", (lead_id,))
    with db.transaction(url) as conn:
        suppress(conn, ADDRESS, "unsubscribed", "unsubscribe link")  # history with the address
    with psycopg.connect(url) as c:
        c.execute("INSERT INTO outreach.inbound_messages (account, folder, uidvalidity, uid, message_id,"
                  " from_address, subject, class, evidence, email_id, lead_id)"
                  " VALUES ('imap_x', 'INBOX', 1, 1, 'r1@x', %s, 'Re: hello Zenobia', 'reply',"
                  " 'In-Reply-To', %s, %s)", (ADDRESS, email_id, lead_id))
        c.execute("INSERT INTO outreach.delivery_failures (source, email_id, address, reason, owner,"
                  " diagnostic, occurred_at) VALUES ('inbound:1', %s, %s, 'userunknown', 'address',"
                  " %s, now())", (email_id, ADDRESS, f"550 5.1.1 <{ADDRESS}> unknown"))
        c.execute("INSERT INTO outreach.import_runs (kind, file, rows_total, imported, updated,"
                  " duplicate, invalid, suppressed, enrolled, problems) VALUES ('leads', 'x.csv',"
                  " 2, 0, 0, 0, 2, 0, 0, %s)",
                  (json.dumps([{"line": 2, "field": "title", "reason": "too long: Zenobia Q"},
                               {"line": 3, "field": "email", "reason": "not an address: x@"}]),))
        c.execute("SELECT * FROM outreach.enqueue_transactional('welcome-1', %s, 'welcome', %s)",
                  (ADDRESS, json.dumps({"first_name": "Zenobia"})))
        c.execute("INSERT INTO outreach.events (kind, lead_id, payload) VALUES ('note', %s, %s)",
                  (lead_id, json.dumps({"step_id": 1, "who": ADDRESS})))
    assert set(_holders(url)) >= {"leads", "emails", "send_log", "suppressions", "suppression_events",
                                  "inbound_messages", "delivery_failures", "import_runs", "events"}
    return csv, lead_id


@pytest.fixture
def erased(tx_url, db_url, tmp_path, sink, settings, monkeypatch, capsys):
    """The person imported, sent to, suppressed, replied, bounced, quoted in problem lines and
    an event; then ``outreach lead erase`` (the CLI entry point). Yields (csv, lead id, output)."""
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("OUTREACH_ERASURE_KEY", KEY)
    csv, lead_id = _seed(db_url, tmp_path, sink, settings)
    capsys.readouterr()
    assert cli.main(["lead", "erase", ADDRESS.upper(), "--reason", "ticket 42", "--by", "dpo"]) == 0
    return csv, lead_id, capsys.readouterr().out


def test_erase_leaves_no_trace_and_keeps_the_rows_the_promise_needs(db_url, erased):
    _, lead_id, out = erased
    assert "z***@proseware.example" in out and ADDRESS not in out
    assert _holders(db_url) == {}
    # The rows the promise needs stay: one email row per lead and step, the send log's entries.
    assert scalar(db_url, "SELECT count(*) FROM outreach.send_log") == 2
    assert scalar(db_url, "SELECT count(*) FROM outreach.send_log sl JOIN outreach.emails e"
                          " ON e.id = sl.email_id WHERE e.lead_id = %s AND e.status = 'sent'"
                          " AND sl.message_id <> ''", (lead_id,)) == 1
    record = rows(db_url, "SELECT actor, reason, lead_id, counts FROM outreach.erasures")
    assert [(r["actor"], r["reason"], r["lead_id"]) for r in record] == [("dpo", "ticket 42", lead_id)]
    assert record[0]["counts"]["leads"] == 1 and record[0]["counts"]["send_log"] == 1
    # The audit trail has the decision with the OS user, the typed name and the counts.
    audit = rows(db_url, "SELECT actor, via, action, target_kind, target_key, reason, details"
                         " FROM outreach.audit_log WHERE action = 'erase'")
    assert len(audit) == 1 and audit[0]["actor"].startswith("os:")
    assert (audit[0]["via"], audit[0]["target_kind"], audit[0]["target_key"], audit[0]["reason"]) == (
        "cli", "lead", None, "ticket 42")
    assert audit[0]["details"]["by"] == "dpo"
    assert audit[0]["details"]["counts"] == record[0]["counts"]


def test_a_reimport_of_the_same_line_is_refused_as_suppressed(db_url, erased):
    csv, _, _ = erased
    again = import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    assert (again.imported, again.suppressed) == (0, 1)
    assert _holders(db_url) == {}


def test_queueing_and_the_handoff_refuse_the_address(db_url, erased, sink, settings):
    # A lead with the address that got in anyway (a concurrent import that asked before the
    # erasure committed) is not queued, and a row queued for it is suppressed right before the
    # handoff; nothing reaches the server.
    with psycopg.connect(db_url) as c:
        back = c.execute("INSERT INTO outreach.leads (email, first_name, company) VALUES (%s, 'Zenobia', 'Acme')"
                         " RETURNING id", (ADDRESS,)).fetchone()[0]
        c.execute("INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id)"
                  " SELECT id, %s, 1 FROM outreach.campaigns", (back,))
    before = len(sink.messages())
    queue_due(db_url)
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE lead_id = %s", (back,)) == 0
    with psycopg.connect(db_url) as c:
        c.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id, scheduled_for)"
                  " SELECT %s, st.id, st.campaign_id, 1, now() - interval '1 minute'"
                  " FROM outreach.sequence_steps st WHERE st.position = 1", (back,))
    send_all(db_url, settings)
    assert [r["status"] for r in rows(db_url, "SELECT status::text FROM outreach.emails"
                                              " WHERE lead_id = %s", (back,))] == ["suppressed"]
    assert len(sink.messages()) == before  # (its one message went out before the erasure)
    # Transactional queueing too, and the row queued before the erasure will not go out.
    with db.connect(db_url) as c:
        row = c.execute("SELECT * FROM outreach.enqueue_transactional('welcome-2', %s, 'welcome')",
                        (ADDRESS,)).fetchone()
        assert row["status"] == "suppressed"
        assert c.execute("SELECT status::text FROM outreach.emails WHERE delivery_key = 'welcome-1'"
                         ).fetchone()["status"] == "suppressed"


def test_erasing_twice_is_harmless(db_url, erased, capsys):
    assert cli.main(["lead", "erase", ADDRESS, "--reason", "ticket 42, again", "--by", "dpo"]) == 0
    assert "nothing left to erase" in capsys.readouterr().out
    assert scalar(db_url, "SELECT count(*) FROM outreach.suppressions WHERE kind = 'address_hmac'") == 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.erasures") == 2
    assert _holders(db_url) == {}


def test_without_the_key_erasure_fails_in_one_line_and_suppression_fails_closed(
        db_url, monkeypatch, capsys):
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.delenv("OUTREACH_ERASURE_KEY", raising=False)
    assert cli.main(["lead", "erase", ADDRESS, "--reason", "ticket 7"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "OUTREACH_ERASURE_KEY" in out and out.startswith("outreach: error:")
    assert scalar(db_url, "SELECT count(*) FROM outreach.erasures") == 0
    # The database refuses too: the stored function needs the key (no silent non-match).
    with psycopg.connect(db_url) as c, pytest.raises(psycopg.errors.InvalidParameterValue,
                                                     match="erasure key is not set"):
        c.execute("SELECT * FROM outreach.erase_person_v1(%s, 'dpo', 'ticket 7')", ([ADDRESS],))

    monkeypatch.setenv("OUTREACH_ERASURE_KEY", KEY)
    assert cli.main(["lead", "erase", ADDRESS, "--reason", "ticket 7"]) == 0
    with db.connect(db_url, autocommit=True) as c:  # the key from the environment
        assert c.execute("SELECT outreach.is_suppressed(%s)", (f" {ADDRESS.title()}",)).fetchone()
    # Once someone was erased, a session without the key, or with another one, cannot decide.
    with psycopg.connect(db_url) as c, pytest.raises(psycopg.errors.InvalidParameterValue,
                                                     match="erasure key is not set"):
        c.execute("SELECT outreach.is_suppressed('someone@else.example')")
    with db.connect(db_url, erasure_key="another key, not the one used 0123456789") as c, \
            pytest.raises(psycopg.errors.InvalidParameterValue, match="not the key"):
        c.execute("SELECT outreach.is_suppressed('someone@else.example')")
    # A reason that names the person is refused (it is kept).
    assert cli.main(["lead", "erase", ADDRESS, "--reason", f"asked by {ADDRESS}"]) == 1
    assert "must not name the person" in capsys.readouterr().out


def test_the_sql_hmac_is_rfc_2104_hmac_sha256(db_url):
    cases = [(b"k" * 32, ADDRESS), (b"x" * 100, "zoë@bücher.example"), (b"key with spaces", "")]
    with psycopg.connect(db_url) as c:
        for key, message in cases:
            got = c.execute("SELECT encode(outreach.hmac_sha256(%s, convert_to(%s, 'UTF8')), 'hex')",
                            (key, message)).fetchone()[0]
            assert got == hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def test_an_export_after_the_erasure_holds_neither_address_nor_name(db_url, erased, tmp_path):
    from outreach.export import FileTarget, export

    folder = tmp_path / "export"
    folder.mkdir()
    result = export(db_url, FileTarget("erasure-check", folder), batch=100)
    assert result.events > 0
    text = "".join(p.read_text(encoding="utf-8").lower() for p in sorted(folder.glob("*.jsonl")))
    assert text and not [n for n in NEEDLES if n.lower() in text]


# A mixed set after an erasure: the erased person (another spelling), an address and a domain
# suppressed for marketing only (unsubscribed, complained) or for every class (manual), and
# addresses nobody suppressed; the same address twice and a NULL too.
MIXED = {
    f"  {ADDRESS.upper()}": ("marketing", "transactional"),        # erased: every class
    "Uma.Unsub@proseware.example": ("marketing",),                 # address, unsubscribed
    "manual.stop@proseware.example": ("marketing", "transactional"),  # address, manual
    "anyone@Complainers.example": ("marketing",),                  # domain, complained
    "x@blocked-domain.example": ("marketing", "transactional"),    # domain, do-not-contact
    "free.person@proseware.example": (),
    "zenobia.quillfeather@other.example": (),                      # the erased local part elsewhere
}


def test_the_set_form_and_the_per_address_rule_agree_on_a_mixed_set(db_url, erased, tmp_path):
    with db.transaction(db_url) as conn:
        suppress(conn, "uma.unsub@proseware.example", "unsubscribed", "unsubscribe link")
        suppress(conn, "manual.stop@proseware.example", "manual", "test")
        suppress(conn, "complainers.example", "complained", "test")
        suppress(conn, "blocked-domain.example", "do-not-contact", "test")
    given = [*MIXED, "free.person@proseware.example", None]
    with db.connect(db_url) as c:
        for message_class in ("marketing", "transactional"):
            expected = {a for a, classes in MIXED.items() if message_class in classes}
            per_address = {a for a in MIXED if c.execute("SELECT outreach.is_suppressed(%s, %s) AS s",
                                                         (a, message_class)).fetchone()["s"]}
            as_set = [r["address"] for r in c.execute(
                "SELECT address FROM outreach.suppressed_addresses(%s, %s)", (given, message_class))]
            assert per_address == expected, message_class
            assert sorted(as_set) == sorted(expected), message_class  # as given, each once
    # The bulk paths: an import of the mixed set stores exactly the addresses the per-address
    # rule lets through (the import marks its staged rows set-based), and queue-due queues exactly
    # the enrolled leads it lets through.
    free = {a for a, classes in MIXED.items() if "marketing" not in classes}
    csv = leads_csv(tmp_path, [f"{a.strip()},X,Y" for a in MIXED], name="mixed.csv")
    got = import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    assert (got.imported, got.suppressed) == (len(free), len(MIXED) - len(free))
    with psycopg.connect(db_url) as c:
        ids = {a: c.execute("INSERT INTO outreach.leads (email, first_name, company)"
                            " VALUES (%s, 'X', 'Y') ON CONFLICT (email) DO UPDATE SET company = 'Y'"
                            " RETURNING id", (a.strip().lower(),)).fetchone()[0] for a in MIXED}
        c.execute("INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id)"
                  " SELECT c.id, l, 1 FROM outreach.campaigns c, unnest(%s::bigint[]) l"
                  " ON CONFLICT DO NOTHING", (list(ids.values()),))
    queue_due(db_url)
    queued = {r["lead_id"] for r in rows(db_url, "SELECT lead_id FROM outreach.emails WHERE lead_id = ANY (%s)",
                                         (list(ids.values()),))}
    assert queued == {ids[a] for a in free}


def test_the_sessions_key_check_proof_is_honoured_only_for_the_right_key(db_url, erased):
    # outreach.db.connect passes the proof (db.erasure_key_check) beside the key; the database
    # takes it only when it matches the stored fingerprint, so a wrong key with its own proof,
    # or the right key with a stale proof, still gets the full check.
    wrong = "another key, not the one used 0123456789"
    with db.connect(db_url, erasure_key=wrong) as c, \
            pytest.raises(psycopg.errors.InvalidParameterValue, match="not the key"):
        c.execute("SELECT outreach.is_suppressed('someone@else.example')")
    with db.connect(db_url, erasure_key=wrong) as c, \
            pytest.raises(psycopg.errors.InvalidParameterValue, match="not the key"):
        list(c.execute("SELECT * FROM outreach.suppressed_addresses(ARRAY['a@b.example', %s])", (ADDRESS,)))
    with db.connect(db_url) as c:  # the right key and its proof
        assert c.execute("SELECT outreach.is_suppressed(%s) AS s", (ADDRESS,)).fetchone()["s"]
        c.execute("SELECT set_config('outreach.erasure_key_check', %s, false)",
                  (db.erasure_key_check(wrong),))  # a stale proof: the full check, which passes
        assert c.execute("SELECT outreach.is_suppressed(%s) AS s", (ADDRESS,)).fetchone()["s"]
        c.execute("SELECT set_config('outreach.erasure_key', %s, false)", (wrong,))  # key changed
        c.execute("SELECT set_config('outreach.erasure_key_check', %s, false)", (db.erasure_key_check(KEY),))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not the key"):
            c.execute("SELECT outreach.is_suppressed('someone@else.example')")
