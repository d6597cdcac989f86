"""Provider-aware throttling (issue 25, item 3; migration 0141): the recipient's mailbox provider
from its MX records, cached with the TTL by outreach.mxproviders (a real DNS server on loopback),
and per-mailbox hourly caps per provider decided inside the claim (outreach.claim_emails_v4),
checked with concurrent senders and at a real SMTP server."""

from __future__ import annotations

import datetime as dt

import pytest

from outreach import db, mxproviders
from outreach.claim import claim
from support.dnszone import dns_server, mx
from support.flow import leads_csv, one_mailbox, outreach, rows, scalar
from support.paths import CAMPAIGN, MAILBOXES, SMTP_CONN_IDS
from support.scenario import claim_until_drained

NOW = dt.datetime(2026, 3, 4, 10, 7, tzinfo=dt.UTC)
PER_BOX = 30  # Microsoft and Google recipients each, per mailbox
MAILBOXES_N = 4  # two senders each: 8 concurrent senders
CAP = 5


def _zone(ttl: int = 7200, msft_host: str = "msft-example.mail.protection.outlook.com"):
    records = [mx("msft.example", msft_host), mx("goog.example", "aspmx.l.google.com"),
               mx("goog.example", "alt1.aspmx.l.google.com", 20),
               mx("own.example", "mail.own.example")]
    for r in records:
        r.ttl = ttl
    return records


def _seed(conn) -> list[int]:
    boxes = [conn.execute(
        "INSERT INTO outreach.mailboxes (address, smtp_conn_id, daily_cap) VALUES (%s, 'smtp',"
        " 10000) RETURNING id", (f"box{i}@sender.example",)).fetchone()["id"]
        for i in range(MAILBOXES_N)]
    camp = conn.execute(
        "INSERT INTO outreach.campaigns (key, name, timezone, send_days, window_start,"
        " window_end, source_file, status) VALUES ('c', 'C', 'UTC', '{1,2,3,4,5,6,7}', '00:00',"
        " '24:00', 'x.yaml', 'active') RETURNING id").fetchone()["id"]
    step = conn.execute(
        "INSERT INTO outreach.sequence_steps (campaign_id, position, template, subject,"
        " delay_days) VALUES (%s, 1, 't', 's', 0) RETURNING id", (camp,)).fetchone()["id"]
    for b, box in enumerate(boxes):
        for i in range(PER_BOX * 2):
            domain = "msft.example" if i % 2 else "goog.example"
            lead = conn.execute("INSERT INTO outreach.leads (email) VALUES (%s) RETURNING id",
                                (f"p{b}-{i}@{domain}",)).fetchone()["id"]
            conn.execute("INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id)"
                         " VALUES (%s, %s, %s)", (camp, lead, box))
            conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id,"
                         " scheduled_for) VALUES (%s, %s, %s, %s, %s)",
                         (lead, step, camp, box, NOW - dt.timedelta(hours=1)))
    return boxes


def _senders(db_url: str, boxes: list[int], caps: dict[str, int]) -> None:
    claim_until_drained(db_url, [box for box in boxes for _ in range(2)], now=NOW, batch=4,
                        rounds=40, person_per_day=1, person_per_week=3, provider_hourly=caps)


def _per_box(conn, status: str) -> dict[tuple[int, str], int]:
    return {(r["mailbox_id"], r["provider"]): r["n"] for r in conn.execute(
        "SELECT e.mailbox_id, outreach.provider_of(l.email, %s) AS provider, count(*) AS n"
        " FROM outreach.emails e JOIN outreach.leads l ON l.id = e.lead_id WHERE e.status = %s"
        " GROUP BY 1, 2", (NOW, status))}


def test_concurrent_senders_keep_microsoft_within_the_hourly_cap_and_google_going(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
    with dns_server(_zone()) as ns:
        assert mxproviders.refresh(db_url, nameserver=ns, now=NOW) == {"looked_up": 2,
                                                                        "failed": 0}
    _senders(db_url, boxes, {"microsoft": CAP})
    with db.connect(db_url, autocommit=True) as conn:
        sending = _per_box(conn, "sending")
        assert sending == {**{(b, "microsoft"): CAP for b in boxes},
                           **{(b, "google"): PER_BOX for b in boxes}}
        held = conn.execute(
            "SELECT count(*) AS n, min(scheduled_for) AS lo, max(scheduled_for) AS hi,"
            " array_agg(DISTINCT hold_reason) AS why FROM outreach.emails"
            " WHERE status = 'queued'").fetchone()
        assert held["n"] == (PER_BOX - CAP) * MAILBOXES_N
        assert held["lo"] == held["hi"] == NOW + dt.timedelta(hours=1)  # a rolling hour
        assert held["why"] == [f"provider cap: microsoft {CAP} an hour"]
        # An hour later the mailbox may send CAP more to Microsoft, no more.
        later = NOW + dt.timedelta(hours=1, seconds=1)
        got, _ = claim(conn, boxes[0], 100, worker="w", now=later, person_per_day=1,
                       person_per_week=3, provider_hourly={"microsoft": CAP})
        assert len(got) == CAP


def test_the_mx_cache_keeps_the_ttl_and_the_claim_never_looks_up(db_url):
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
        conn.execute("UPDATE outreach.leads SET email = replace(email, 'goog.example',"
                     " 'own.example') WHERE id % 4 = 1")
    with dns_server(_zone(ttl=7200)) as ns:
        assert mxproviders.refresh(db_url, nameserver=ns, now=NOW)["looked_up"] == 3
        cached = {r["domain"]: (r["provider"], r["expires_at"]) for r in rows(
            db_url, "SELECT domain, provider, expires_at FROM outreach.mx_providers")}
        assert cached == {"msft.example": ("microsoft", NOW + dt.timedelta(seconds=7200)),
                          "goog.example": ("google", NOW + dt.timedelta(seconds=7200)),
                          "own.example": ("other", NOW + dt.timedelta(seconds=7200))}
    # Within the TTL a run looks nothing up: no DNS server is needed (none answers).
    dead = "127.0.0.1:9"
    assert mxproviders.refresh(db_url, nameserver=dead, now=NOW + dt.timedelta(minutes=30),
                               timeout=0.5) == {"looked_up": 0, "failed": 0}
    # Near the end of the TTL it is looked up again, and a changed MX changes the provider.
    soon = NOW + dt.timedelta(seconds=7200) - dt.timedelta(minutes=10)
    with dns_server(_zone(ttl=60, msft_host="aspmx.l.google.com")) as ns:
        assert mxproviders.refresh(db_url, nameserver=ns, now=soon)["looked_up"] == 3
    assert rows(db_url, "SELECT provider, expires_at FROM outreach.mx_providers WHERE domain ="
                " 'msft.example'") == [{"provider": "google",  # a short TTL: MIN_TTL
                                        "expires_at": soon + dt.timedelta(
                                            seconds=mxproviders.MIN_TTL)}]
    # The claim reads the cache only: an expired entry is 'other', so the Microsoft cap no
    # longer holds those rows (with no DNS server anywhere).
    with db.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE outreach.mx_providers SET provider = 'microsoft',"
                     " expires_at = %s WHERE domain = 'msft.example'",
                     (NOW + dt.timedelta(minutes=1),))
        got, _ = claim(conn, boxes[0], 100, worker="w", now=NOW, person_per_day=1,
                       person_per_week=3, provider_hourly={"microsoft": 1})
        assert sum(r["email"].endswith("@msft.example") for r in got) == 1
        expired = NOW + dt.timedelta(minutes=2)
        got, _ = claim(conn, boxes[1], 100, worker="w", now=expired, person_per_day=1,
                       person_per_week=3, provider_hourly={"microsoft": 1})
        assert sum(r["email"].endswith("@msft.example") for r in got) == PER_BOX


def test_a_row_counts_for_the_provider_it_was_claimed_for_within_its_hour(db_url):
    """The hour's count reads the provider each row was claimed for (emails.provider, 0144),
    not its domain's provider now: a domain whose MX moves to Google within the hour does not
    turn the Microsoft mail already sent into Google mail."""
    with db.connect(db_url, autocommit=True) as conn:
        boxes = _seed(conn)
    with dns_server(_zone()) as ns:
        assert mxproviders.refresh(db_url, nameserver=ns, now=NOW)["looked_up"] == 2
    caps = {"google": CAP}
    with db.connect(db_url, autocommit=True) as conn:
        got, _ = claim(conn, boxes[0], 100, worker="w", now=NOW, person_per_day=1,
                       person_per_week=3, provider_hourly=caps)
        assert len(got) == PER_BOX + CAP
        assert {r["provider"]: r["n"] for r in conn.execute(
            "SELECT provider, count(*) AS n FROM outreach.emails WHERE status = 'sending'"
            " GROUP BY 1")} == {"microsoft": PER_BOX, "google": CAP}
        conn.execute("UPDATE outreach.mx_providers SET provider = 'google'"
                     " WHERE domain = 'msft.example'")
        camp, step = conn.execute("SELECT campaign_id, step_id FROM outreach.emails"
                                  " LIMIT 1").fetchone().values()
        for i in range(2):
            lead = conn.execute("INSERT INTO outreach.leads (email) VALUES (%s) RETURNING id",
                                (f"new{i}@goog.example",)).fetchone()["id"]
            conn.execute("INSERT INTO outreach.enrollments (campaign_id, lead_id, mailbox_id)"
                         " VALUES (%s, %s, %s)", (camp, lead, boxes[0]))
            conn.execute("INSERT INTO outreach.emails (lead_id, step_id, campaign_id, mailbox_id,"
                         " scheduled_for) VALUES (%s, %s, %s, %s, %s)",
                         (lead, step, camp, boxes[0], NOW))
        # Ten minutes later Google has had CAP of this mailbox's hour: two more fit a cap of
        # CAP + 2 (counted by the domain's provider now it would be PER_BOX + CAP: none).
        got, _ = claim(conn, boxes[0], 100, worker="w", now=NOW + dt.timedelta(minutes=10),
                       person_per_day=1, person_per_week=3,
                       provider_hourly={"google": CAP + 2})
        assert sorted(r["email"] for r in got) == ["new0@goog.example", "new1@goog.example"]


def test_provider_caps_must_name_known_providers_and_whole_numbers(db_url):
    from outreach.settings import _provider_caps

    assert _provider_caps("microsoft=20, Google=40") == {"microsoft": 20, "google": 40}
    assert _provider_caps("") == {}
    for bad in ("microsoft", "hotmail=3", "microsoft=0", "microsoft=1_0", "google=1,google=2"):
        with pytest.raises(ValueError):
            _provider_caps(bad)
    with db.connect(db_url, autocommit=True) as conn, pytest.raises(Exception, match="provider caps"):
        conn.execute("SELECT * FROM outreach.claim_emails_v4('marketing', 1, 1,"
                     " gen_random_uuid(), 'w', now(), NULL, NULL, NULL, '{\"hotmail\": 3}')")


def test_a_send_run_hands_over_within_the_cap_at_a_real_smtp_server(db_url, sink, tmp_path):
    from outreach.leads import import_leads
    from outreach.queue import queue_due

    addresses = [f"m{i}@msft.example" for i in range(6)] + [f"g{i}@goog.example" for i in range(6)]
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, addresses))
    one_mailbox(db_url)
    assert queue_due(db_url)["queued"] == 12
    with dns_server(_zone()) as ns:
        assert mxproviders.refresh(db_url, nameserver=ns)["looked_up"] == 2
    env = {f"AIRFLOW_CONN_{c.upper()}": sink.connection_json() for c in SMTP_CONN_IDS}
    p = outreach(db_url, "send", "--until-empty",
                 OUTREACH_PROVIDER_HOURLY="microsoft=2", **env)
    assert p.returncode == 0, p.stderr
    domains = sorted(str(m["To"]).rsplit("@", 1)[1].strip(">") for m in sink.messages())
    assert domains == ["goog.example"] * 6 + ["msft.example"] * 2
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued' AND"
                  " hold_reason = 'provider cap: microsoft 2 an hour'") == 4
