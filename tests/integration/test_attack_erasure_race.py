"""Attack: an import of the address committing across an erasure must not re-create the person."""

from __future__ import annotations

import threading

from outreach.erasure import erase
from outreach.leads import import_leads
from outreach.store import leads as leads_store
from support.flow import leads_csv, scalar
from support.paths import CAMPAIGN, MAILBOXES

KEY = "test-erasure-key-0123456789abcdef-0123"
ADDRESS = "zenobia.quillfeather@proseware.example"


def test_an_import_racing_an_erasure_stores_no_new_lead_of_the_address(
        db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OUTREACH_ERASURE_KEY", KEY)
    csv = leads_csv(tmp_path, [f"{ADDRESS},Zenobia,Quillfeather Freight"])
    import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    real = leads_store.lead_upsert_staged
    errors: list[Exception] = []

    def run_erase() -> None:
        try:
            erase(db_url, ADDRESS, actor="dpo", reason="ticket 7")
        except Exception as exc:  # noqa: BLE001 - checked by the main thread
            errors.append(exc)

    eraser = threading.Thread(target=run_erase)

    def erase_meanwhile(conn):
        # The import asked the suppression rule already; the erasure is asked now, before the
        # upsert: unguarded it commits at once, guarded it waits for this import to commit.
        eraser.start()
        eraser.join(timeout=3)
        return real(conn)

    monkeypatch.setattr(leads_store, "lead_upsert_staged", erase_meanwhile)
    import_leads(db_url, CAMPAIGN, MAILBOXES, csv)
    eraser.join(timeout=30)
    assert not errors, errors
    assert scalar(db_url, "SELECT count(*) FROM outreach.erasures") == 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.leads WHERE email = %s", (ADDRESS,)) == 0
