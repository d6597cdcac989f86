"""The project's paths and the demo's files and SMTP connection ids, as the tests use them."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "include" / "campaigns" / "demo.yaml"
MAILBOXES = ROOT / "include" / "mailboxes.yaml"
LEADS = ROOT / "include" / "data" / "sample_leads.csv"
DNC = ROOT / "include" / "data" / "do_not_contact.csv"
SMTP_CONN_IDS = ("outreach_smtp_anna", "outreach_smtp_ben", "outreach_smtp_hello")
DATA = ROOT / "tests" / "support" / "data"


def doc_images() -> Path:
    """The folder the browser tests save the pictures the docs show into: ``docs/img/`` when
    ``OUTREACH_TEST_SCREENSHOTS=docs`` (to refresh them, then commit them), else
    ``.test-artifacts/docs-img/`` (ignored by git), so that a test run leaves the committed
    pictures, and the working tree, as they were. Created when missing."""
    folder = ROOT / "docs" / "img" if os.environ.get("OUTREACH_TEST_SCREENSHOTS") == "docs" \
        else ROOT / ".test-artifacts" / "docs-img"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
