"""What the launch approval's Required Action shows (issue 24, item 4;
:mod:`outreach.approval`), from a real database: the leads to be contacted and the skipped ones
by reason, the first days' volume per mailbox under its warm-up, the preflight per domain, and
sample renders with the lead's address masked and its text unable to leave the code fence."""

from __future__ import annotations

import datetime as dt

import psycopg

from outreach import db
from outreach.approval import awaiting, gather, markdown
from outreach.campaign_pause import change_status
from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.send import claim
from support.flow import EXPECTED_LEADS, import_demo, leads_csv
from support.paths import CAMPAIGN, LEADS, MAILBOXES


def test_the_approval_shows_leads_skips_volume_and_inert_samples(db_url, settings, tmp_path):
    draft = tmp_path / "draft.yaml"
    draft.write_text(CAMPAIGN.read_text().replace("status: active\n", ""))
    csv = leads_csv(tmp_path, ["ana@acme.example,Ana ```</pre><script>x</script>,Acme",
                               "bo@globex.example,Bo,", "cy@initech.example,Cy,Initech",
                               "di@umbrella.example,Di,Umbrella"])
    import_leads(db_url, draft, MAILBOXES, csv)
    with psycopg.connect(db_url) as conn:  # both mailboxes in their first warm-up week: 1 a day
        conn.execute("UPDATE outreach.mailboxes SET warmup_start = current_date - 1, "
                     "warmup_initial = 1, warmup_days = 7")
    assert awaiting(db_url) == []
    change_status(db_url, "q4-ops-intro", "submit", "alice", "ready")
    [campaign] = awaiting(db_url)
    assert (campaign["key"], campaign["submitted_by"]) == ("q4-ops-intro", "alice")
    facts = gather(db_url, campaign, settings, days=3, now=dt.datetime.now(dt.UTC),
                   preflight=lambda ms: {m["domain"]: "PASS" for m in ms})
    assert (facts["enrolled"], facts["to_contact"]) == (4, 3)
    assert facts["skipped"] == {"missing required field(s): company": 1}
    assert sum(m["leads"] for m in facts["mailboxes"]) == 3
    for m in facts["mailboxes"]:  # 1 a day until the mailbox's leads are all sent
        assert [n for _, n in m["volume"]] == [min(1, max(m["leads"] - d, 0)) for d in range(3)]
    assert facts["preflight"] == {"mail.outreach-demo.example": "PASS"}
    assert len(facts["samples"]) == 2
    body = markdown(facts)
    assert "**3 lead(s) to be contacted** by step 1, of 4 enrolled." in body
    assert "| missing required field(s): company | 1 |" in body
    for address in ("ana@acme.example", "cy@initech.example", "di@umbrella.example"):
        assert address not in body
    assert "a***@acme.example" in body
    # The lead's text stays inside its fence: a fence longer than any backtick run in it.
    assert "````text\n" in body and "\n````" in body
    # The samples say what the preview says: before queue-due, the Message-ID and the
    # List-Unsubscribe token are placeholders (the same in both samples), and which content
    # version is the step's; the campaign's is labelled as the campaign's.
    assert body.count("- not queued yet: Message-ID and unsubscribe token are placeholders "
                      "(fixed when queue-due queues the step)") == 2
    assert body.count("- step content version ") == 2
    assert body.startswith(f"Campaign `q4-ops-intro` (Q4 operations leaders — intro), campaign "
                           f"content version `{campaign['content_version']}`.")


def test_todays_volume_is_what_the_mailbox_has_left_and_the_rest_spills(db_url, settings,
                                                                       tmp_path):
    """The tutorial's case: each mailbox sent 98 of its 150 today for the demo campaign; a new
    campaign's forecast gets today only the 52 left (mailbox_remaining_today), the rest the next
    days."""
    at = dt.datetime(2026, 3, 4, 10, 0, tzinfo=dt.UTC)
    import_demo(db_url, now=at)
    assert queue_due(db_url, now=at)["queued"] == EXPECTED_LEADS
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outreach.mailboxes SET warmup_start = NULL, daily_cap = 150")
        ids = [r[0] for r in conn.execute("SELECT DISTINCT mailbox_id FROM outreach.emails "
                                          "ORDER BY 1")]
    with db.connect(db_url, autocommit=True) as conn:
        for mb in ids:
            assert len(claim(conn, mb, 98, worker="t", now=at)[0]) == 98
    draft = tmp_path / "my-first.yaml"
    draft.write_text(CAMPAIGN.read_text().replace("status: active\n", "")
                     .replace("key: q4-ops-intro", "key: my-first"))
    import_leads(db_url, draft, MAILBOXES, LEADS, now=at)
    change_status(db_url, "my-first", "submit", "alice", "ready")
    [campaign] = awaiting(db_url)
    facts = gather(db_url, campaign, settings, days=3, now=at)
    assert [(m["leads"], m["used_today"]) for m in facts["mailboxes"]] == [(98, 98), (98, 98)]
    for m in facts["mailboxes"]:
        assert [n for _, n in m["volume"]] == [52, 46, 0]
    assert "| anna — sales | active | 98 | 98 | 52 | 46 | 0 |" in markdown(facts)
