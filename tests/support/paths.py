"""The project's paths and the demo's files and SMTP connection ids, as the tests use them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "include" / "campaigns" / "demo.yaml"
MAILBOXES = ROOT / "include" / "mailboxes.yaml"
LEADS = ROOT / "include" / "data" / "sample_leads.csv"
DNC = ROOT / "include" / "data" / "do_not_contact.csv"
SMTP_CONN_IDS = ("outreach_smtp_anna", "outreach_smtp_ben", "outreach_smtp_hello")
DATA = ROOT / "tests" / "support" / "data"
