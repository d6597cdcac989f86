"""Attack: an import of the address committing across an erasure re-creates the person."""

from __future__ import annotations

import threading

import pytest

from outreach.erasure import erase
from outreach.leads import import_leads
from outreach.store import leads as leads_store
from support.flow import leads_csv, scalar
from support.paths import CAMPAIGN, MAILBOXES

KEY = "test-erasure-key-0123456789abcdef-0123"
ADDRESS = "zenobia.quillfeather@proseware.example"


@pytest.mark.xfail(strict=True, reason="attack finding: the import asks is_suppressed before its"
                   " upsert; an erasure committing in between is not seen")
def test_an_import_racing_an_erasure_stores_no_new_lead_of_the_address(
        db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OUTREACH_ERASURE_KEY", KEY)
    csv = leads_csv(tmp_path, [f"{ADDRESS},Zenobia,Quillfeather Freight"])
    import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    real = leads_store.lead_upsert_staged

    def erase_meanwhile(conn):
        # The import asked the suppression rule already; the erasure commits before its upsert.
        t = threading.Thread(target=erase, args=(db_url, ADDRESS),
                             kwargs={"actor": "dpo", "reason": "ticket 7"})
        t.start()
        t.join(timeout=30)
        return real(conn)

    monkeypatch.setattr(leads_store, "lead_upsert_staged", erase_meanwhile)
    import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    assert scalar(db_url, "SELECT count(*) FROM outreach.erasures") == 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads WHERE email = %s", (ADDRESS,)) == 0
