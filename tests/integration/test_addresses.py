"""One address normaliser (issue 12, item 8): outreach.addresses.normalize_address decides what an
address is; the SQL functions (outreach.normalize_address), the importer and the example signup
app use it, so one person is one user and gets one welcome email however the address was typed."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from outreach import db
from outreach.addresses import normalize_address
from outreach.airflow.connections import smtp_connector
from outreach.suppression import is_suppressed, suppress
from outreach.transactional import send_due
from support import invariants
from support.flow import rows, scalar
from support.signupapp import welcome_messages

SPELLINGS = ["jo@example.com", " jo@example.com ", "jo@example.com\t", "\tJo@Example.COM\r\n",
             "\u00a0jo@EXAMPLE.com\u3000", "zoe\u0308@bu\u0308cher.example",       # NFD
             "Zoë@Bücher.Example ", "ZOË@XN--BCHER-KVA.EXAMPLE"]


@pytest.mark.parametrize("raw", SPELLINGS)
def test_sql_and_python_agree_on_the_normal_form(db_url, raw):
    py = normalize_address(raw)
    assert py == normalize_address(py)  # a normal form is its own normal form
    with psycopg.connect(db_url) as conn:
        # SQL works on text that is already an address; an ACE domain stays for Python to decode
        if "XN--" not in raw:
            assert conn.execute("SELECT outreach.normalize_address(%s)", (raw,)).fetchone()[0] == py
        assert conn.execute("SELECT outreach.normalize_address(%s)", (py,)).fetchone()[0] == py



def test_the_sql_normal_form_is_inlined_and_keeps_null(db_url):
    """outreach.normalize_address is one expression the planner inlines (migration 0084: not
    STRICT, since a STRICT SQL function with a CASE body runs as a call each time, 5x slower
    inside outreach.is_suppressed); NULL still gives NULL."""
    with psycopg.connect(db_url) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN VERBOSE SELECT outreach.normalize_address(email) FROM outreach.leads"))
        assert conn.execute("SELECT outreach.normalize_address(NULL)").fetchone()[0] is None
    assert "normalize_address" not in plan, plan

def test_the_sql_functions_normalise_what_they_are_given(tx_url):
    with db.connect(tx_url) as conn, conn.transaction():
        suppress(conn, "blocked@example.com", "manual", "test")
        assert is_suppressed(conn, " Blocked@Example.com\t")
        assert is_suppressed(conn, "\tsomeone@EXAMPLE.com ") is False
    with psycopg.connect(tx_url) as conn:
        first = conn.execute("SELECT * FROM outreach.enqueue_transactional('k-sql', %s, 'welcome')",
                             (" Jo@Example.com\t",)).fetchone()
        again = conn.execute("SELECT * FROM outreach.enqueue_transactional('k-sql', %s, 'welcome')",
                             ("jo@example.com",)).fetchone()
    assert first[1] is True and again[1] is False and again[0] == first[0]
    assert scalar(tx_url, "SELECT recipient FROM outreach.emails") == "jo@example.com"


def test_three_spellings_of_one_address_are_one_user_and_one_welcome_email(tx_url, sink, settings,
                                                                        app_factory):
    app = app_factory()

    def post(key: str, email: str) -> httpx.Response:
        return httpx.post(app.base + "/signup", json={"email": email, "name": "Jo"},
                          headers={"Idempotency-Key": key}, timeout=30)

    first = post("k1", " jo@example.com ")
    assert first.status_code == 201, app.output()
    assert post("k2", "jo@example.com").status_code == 409
    assert post("k3", "jo@example.com\t").status_code == 409
    retry = post("k1", " jo@example.com ")                    # the exact retry: a replay
    assert retry.status_code == 200 and retry.json()["replayed"] is True
    assert retry.json()["user_id"] == first.json()["user_id"]
    assert rows(tx_url, "SELECT email FROM signup_example.users") == [{"email": "jo@example.com"}]
    assert scalar(tx_url, "SELECT count(*) FROM outreach.emails") == 1
    assert send_due(tx_url, smtp_connector, settings).sent == 1
    assert len(welcome_messages(sink)) == 1 and len(sink.messages()) == 1
    invariants.assert_ok(tx_url, sink.messages())
    # The table itself refuses another spelling, whoever writes to it.
    with pytest.raises(psycopg.errors.UniqueViolation), psycopg.connect(tx_url) as conn:
        conn.execute("INSERT INTO signup_example.users (email, name, signup_key, verification_token)"
                     " VALUES ('JO@example.com ', 'x', 'k9', 't')")


def test_sql_enqueue_of_a_spelling_the_sql_normaliser_misses_is_not_sent(db_url, sink, settings):
    """The SQL normaliser (trim, NFC, lower) cannot apply IDNA UTS #46 mapping; the transport
    does (ascii_domain). A hard-bounced address written with a full-width domain or a soft hyphen
    through the documented SQL function must still be found suppressed before the handoff."""
    from outreach import db
    from outreach.campaign import sync_mailboxes
    from outreach.suppression import suppress
    from outreach.transactional import send_due
    from support.paths import MAILBOXES

    sync_mailboxes(db_url, MAILBOXES)
    with db.connect(db_url) as conn, conn.transaction():
        suppress(conn, "bounced@example.com", "bounced", "test")
    spellings = ["bounced@\uff45xample.com", "bounced@exam\u00adple.com"]
    with db.connect(db_url) as conn, conn.transaction():
        for n, to in enumerate(spellings):
            conn.execute("SELECT * FROM outreach.enqueue_transactional(%s, %s, 'welcome', %s::jsonb)",
                         (f"k{n}", to, '{"user": {"name": "Jo"}, "verify_url": "https://a.example/v"}'))
    send_due(db_url, smtp_connector, settings)
    assert [m["X-RcptTo"] for m in sink.messages()] == []
    # The full-width spelling is the suppressed address; the soft hyphen, which email-validator
    # refuses (and the transport would silently drop), is no address outreach sends to.
    assert [(r["s"], r["k"]) for r in rows(db_url, "SELECT status::text AS s, failure_kind AS k"
                                                   " FROM outreach.emails ORDER BY id")] == [
        ("suppressed", None), ("failed", "render")]
