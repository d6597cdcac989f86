r"""Evidence for unconfirmed emails from the mailbox's Sent folder (the IMAP folder flagged \Sent,
RFC 6154) on a real Dovecot: found (with its date) / not found, and ``outreach resolve
--auto-found`` resolving only the found ones, the evidence recorded."""

from __future__ import annotations

from outreach.leads import import_leads
from outreach.queue import queue_due
from outreach.resolve import list_unconfirmed, row_message_id
from support import clifork
from support.flow import cli_env, leads_csv, leave_unconfirmed, one_mailbox, rows
from support.inboxflow import ANNA, IMAP_CONN_IDS, mail
from support.paths import CAMPAIGN, MAILBOXES


def test_unconfirmed_rows_get_sent_folder_evidence_and_auto_found_resolves_found_ones(
        db_url, tmp_path, sink, imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    import_leads(db_url, CAMPAIGN, MAILBOXES, leads_csv(tmp_path, ["a@ev.example", "b@ev.example",
                                                                   "c@ev.example"]))
    one_mailbox(db_url)
    queue_due(db_url)
    held = leave_unconfirmed(db_url, 3)  # a sender lost during the handoffs
    unconfirmed = {r["id"]: r for r in list_unconfirmed(db_url)}
    assert sorted(unconfirmed) == held
    # The relay filed the first one in Sent (as Gmail's SMTP does); the others it did not.
    found_mid = row_message_id(unconfirmed[held[0]])
    imap_accounts.append("outreach_imap_anna", mail(ANNA, "Acme and late deliveries", "Hi",
                         to="a@ev.example", message_id=f"<{found_mid}>"), folder="Sent")
    env = cli_env(db_url, sink, **imap_accounts.env())

    p = clifork.run(("unconfirmed",), env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"Message-ID <{found_mid}>: checked: found in Sent folder 'Sent', dated " in p.stdout
    for other in held[1:]:
        assert (f"Message-ID <{row_message_id(unconfirmed[other])}>: checked: not found in Sent folder "
                "'Sent' (proves nothing") in p.stdout
    assert "3 unconfirmed email(s), 1 found in a Sent folder" in p.stdout

    p = clifork.run(("resolve", "--auto-found", "--by", "Dana"), env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"resolved=1 [{held[0]}]" in p.stdout
    state = {r["id"]: (r["status"], r["failure_kind"]) for r in rows(
        db_url, "SELECT id, status::text AS status, failure_kind FROM outreach.emails WHERE id = ANY(%s)",
        (held,))}
    assert state == {held[0]: ("sent", None), held[1]: ("failed", "unconfirmed"),
                     held[2]: ("failed", "unconfirmed")}
    res = rows(db_url, "SELECT email_id, decision, resolved_by, note FROM outreach.email_resolutions")
    assert len(res) == 1 and res[0]["email_id"] == held[0] and res[0]["resolved_by"] == "Dana"
    assert res[0]["note"].startswith("checked: found in Sent folder 'Sent', dated ")
    assert found_mid in res[0]["note"]
    assert rows(db_url, "SELECT message_id, source FROM outreach.send_log") == [
        {"message_id": found_mid, "source": "operator"}]
