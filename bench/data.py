"""Benchmark data: a generated, realistic leads CSV (a CRM export with extra columns, quoted
commas, accented names, mixed case, a few duplicates and invalid rows), campaign and mailbox
files with any number of mailboxes, and a database with a queued step for every lead.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from common import CAMPAIGN, Server, run
from outreach import db
from outreach.leads import import_leads
from outreach.queue import queue_due

FIRST = ("Ana", "Ben", "Chloé", "Dmitri", "Emma", "Fatima", "Gustavo", "Hana", "Ines", "Jörg",
         "Kofi", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Zoë")
LAST = ("Schmidt", "Okafor", "García", "Nguyen", "Müller", "O'Brien", "Rossi", "Kowalski",
        "Dubois", "Yamamoto", "Haddad", "Jensen", "Silva", "Novák", "Smith", "Andersson")
COMPANY = ("Acme Logistics", "Coho Winery", "Northwind Traders", "Fabrikam, Inc.",
           "Contoso Freight", "Tailspin Toys", "Wingtip Parcel", "Litware, Ltd.",
           "Adventure Works", "Blue Yonder Air")
TITLE = ("Head of Operations", "VP Supply Chain", "Logistics Manager", "COO",
         "Director, Fulfilment", "Operations Lead", "")
ZONES = ("Europe/Berlin", "Europe/London", "America/New_York", "Asia/Tokyo", "", "")
HEADER = ("First Name", "Last Name", "Email", "Company Name", "Job Title", "Time Zone",
          "Phone Number", "Lifecycle Stage", "Lead Status")


def write_leads_csv(path: Path, n: int, *, seed: int = 8) -> dict[str, int]:
    """Write a HubSpot-style export of ``n`` data rows to ``path`` (streamed, any size).

    About 0.3 % of rows repeat an earlier address in other letter case and 0.2 % are invalid
    (no @, empty, a bad domain); the rest are distinct valid leads.

    :returns: ``{"rows": n, "duplicates": d, "invalid": i, "valid": n - d - i}``.
    """
    rng = random.Random(seed)
    dup = inv = 0
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for i in range(n):
            first, last = rng.choice(FIRST), rng.choice(LAST)
            company = rng.choice(COMPANY)
            domain = company.split(",")[0].lower().replace(" ", "-") + ".example"
            local = f"{first}.{last}.{i}".replace("'", "").replace(" ", "")
            email = f"{local}@{domain}"
            roll = rng.random()
            if i % 997 == 0:
                email = f"{FIRST[i % len(FIRST)]}.X.{i}@dup.example"  # what duplicates repeat
            elif roll < 0.003 and i > 997:
                j = 997 * rng.randrange(i // 997 + 1)
                email = f"{FIRST[j % len(FIRST)]}.X.{j}@DUP.example".upper()
                dup += 1
            elif roll < 0.005:
                email = rng.choice(("no-at-sign.example", "", f"{local}@", f"{local}@bad_domain"))
                inv += 1
            w.writerow((first, last, email, company, rng.choice(TITLE), rng.choice(ZONES),
                        f"+49 30 {rng.randrange(10**6, 10**7)}", "lead", "NEW"))
    return {"rows": n, "duplicates": dup, "invalid": inv, "valid": n - dup - inv}


def write_config(workdir: Path, mailboxes: int) -> tuple[Path, Path]:
    """Write a mailbox file with ``mailboxes`` mailboxes (connection ids ``bench_smtp_<i>``) and
    the demo campaign sending from all of them; return ``(campaign, mailbox file)``."""
    workdir.mkdir(parents=True, exist_ok=True)
    addresses = [f"sender{i}@mail.bench.example" for i in range(1, mailboxes + 1)]
    mb = workdir / f"mailboxes-{mailboxes}.yaml"
    mb.write_text("mailboxes:\n" + "".join(
        f"  - address: {a}\n    name: Sender {i}\n    smtp_conn_id: bench_smtp_{i}\n"
        f"    timezone: Europe/Berlin\n    daily_cap: 100000\n"
        for i, a in enumerate(addresses, 1)))
    text = CAMPAIGN.read_text(encoding="utf-8")
    head, _, rest = text.partition("mailboxes:\n")
    rest = rest[rest.index("steps:"):]
    campaign = workdir / f"campaign-{mailboxes}.yaml"
    campaign.write_text(head + "mailboxes:\n" + "".join(f"  - {a}\n" for a in addresses) + rest)
    return campaign, mb


def smtp_conn_ids(mailboxes: int) -> list[str]:
    """Return the Airflow SMTP connection ids :func:`write_config` gives the mailboxes."""
    return [f"bench_smtp_{i}" for i in range(1, mailboxes + 1)]


def queued_database(server: Server, name: str, workdir: Path, leads: int, mailboxes: int,
                    *, dkim_selector: str | None = None) -> str:
    """Build database ``name``: migrated, ``leads`` generated leads imported with
    :func:`outreach.leads.import_leads`, step 1 queued with :func:`outreach.queue.queue_due`,
    every mailbox's cap lifted (and ``dkim_selector`` set). Return its URL.

    Distinct valid leads only (no duplicates or invalid rows), so ``leads`` rows are queued.
    """
    url = server.migrated(name)
    path = workdir / f"queued-{name}.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(("Email", "First Name", "Last Name", "Company"))
        for i in range(leads):
            w.writerow((f"lead{i}@bench{i % 97}.example", FIRST[i % len(FIRST)],
                        LAST[i % len(LAST)], COMPANY[i % len(COMPANY)]))
    campaign, mb = write_config(workdir, mailboxes)
    import_leads(url, campaign, mb, path)
    queued = queue_due(url)["queued"]
    if queued != leads:
        raise RuntimeError(f"queued {queued} rows for {leads} leads")
    with db.connect(url, autocommit=True) as conn:
        run(conn, "bench_prepare_mailboxes", {"selector": dkim_selector})
    return url
