"""The tutorial's first campaign (docs/tutorial/first-campaign.md, section 5), walked as a reader
runs it: a campaign with two subject variants imported as a draft, seen as a draft on the
campaign page, submitted and approved with the `outreach` command, queued and sent to a real SMTP
sink, replies read from a real IMAP server (Dovecot) by `outreach inbox`; then the page's
per-variant table, read in a real browser (headless chromium), equals `outreach report --json`'s
``variants`` figure for figure. Every command is the tutorial's, run through the CLI entry point
(tests/support/flow.py ``outreach``) on a real PostgreSQL. Screenshots: the tutorial's
first-campaign-draft.png and first-campaign-variants.png (``support.paths.doc_images``)."""

from __future__ import annotations

import json
import textwrap

import pytest

from support import browser
from support.flow import outreach, rows, scalar
from support.inboxflow import IMAP_CONN_IDS, mail
from support.paths import CAMPAIGN, ROOT, doc_images

KEY = "my-first"
TUTORIAL = ROOT / "docs" / "tutorial" / "first-campaign.md"
MY_FIRST = "include/campaigns/my-first.yaml"  # the tutorial's file; the test's is in tmp_path
# The lines the tutorial adds under step 1 of the copied demo campaign (keep them identical).
VARIANTS = """    variants:
      - name: late
        weight: 50
      - name: question
        subject: "A question about {{ lead.company }}'s carriers"
        weight: 50
"""
REPLIES = {"late": 2, "question": 1}  # replies per variant: how many leads of each answer


@pytest.fixture
def accounts(imap_accounts):
    for conn_id in IMAP_CONN_IDS:
        imap_accounts.add(conn_id)
    return imap_accounts


def my_first_campaign(tmp_path):
    """The tutorial's step 1: the demo campaign copied, its own key and name, no `status:
    active` line, two subject variants on step 1."""
    assert textwrap.indent(VARIANTS, "    ") in TUTORIAL.read_text(), "the tutorial's variants differ"
    demo = CAMPAIGN.read_text()
    assert demo.count("status: active\n") == 1 and demo.count("    requires: [company]\n") == 2
    text = (demo.replace("key: q4-ops-intro", f"key: {KEY}")
            .replace("name: Q4 operations leaders — intro", "name: My first campaign")
            .replace("status: active\n", "")
            .replace("    requires: [company]\n", "    requires: [company]\n" + VARIANTS, 1))
    path = tmp_path / f"{KEY}.yaml"
    path.write_text(text)
    return path


def run(db_url, tmp_path, *args):
    """Run ``outreach ARGS`` as the tutorial says it (the tutorial must show the same command,
    with its campaign file for this test's); return its output."""
    line = " ".join([".venv/bin/outreach", *args]).replace(str(tmp_path / f"{KEY}.yaml"), MY_FIRST)
    assert line in TUTORIAL.read_text(), f"the tutorial does not show: {line}"
    p = outreach(db_url, *args)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def test_the_first_campaign_walk_and_the_page_per_variant_equals_the_report(
        db_url, page_url, sink, accounts, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    campaign = my_first_campaign(tmp_path)
    # 1. Draft: imported and enrolled, nothing queued.
    run(db_url, tmp_path, "import-leads", "--campaign", str(campaign),
        "--csv", "include/data/sample_leads.csv")
    enrolled = scalar(db_url, "SELECT count(*) FROM outreach.enrollments")
    assert enrolled > 100
    assert "queued 0 email(s)" in run(db_url, tmp_path, "queue-due")
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails") == 0
    driver = browser.chromium(tmp_path / "chromium-profile")
    try:
        wait = WebDriverWait(driver, 60)
        driver.set_window_size(1280, 1300)  # the pictures: the campaign's part of the page
        driver.get(f"{page_url}/")
        wait.until(ec.presence_of_element_located((By.ID, "progress")))
        assert browser.figures(driver)[f"progress.{KEY}.status"] == "draft"
        driver.save_screenshot(str(doc_images() / "first-campaign-draft.png"))

        # 3. Submit and approve, as two people; the history says who.
        assert (f"campaign {KEY} submitted for approval\n"
                in run(db_url, tmp_path, "campaign", "submit", KEY, "--by", "alice"))
        assert (f"campaign {KEY} approved: active\n"
                in run(db_url, tmp_path, "campaign", "approve", KEY, "--by", "bob"))
        assert scalar(db_url, "SELECT status FROM outreach.campaigns WHERE key = %s", (KEY,)) == "active"
        history = run(db_url, tmp_path, "campaign", "history", KEY)
        assert "approved by bob" in history and "submitted by alice" in history, history

        # 4. First sends: queue-due queues step 1, send delivers it to the sink.
        assert f"queued {enrolled} email(s)" in run(db_url, tmp_path, "queue-due")
        run(db_url, tmp_path, "send", "--until-empty")
        messages = sink.messages()
        assert len(messages) == enrolled
        subjects = {"question": sum(m["Subject"].startswith("A question about ") for m in messages)}
        subjects["late"] = len(messages) - subjects["question"]
        assert min(subjects.values()) > 0

        # Replies to emails of each variant, in the sending mailbox's inbox (In-Reply-To).
        sent = rows(db_url, """
            SELECT e.variant, s.message_id, l.email, m.imap_conn_id
            FROM outreach.emails e JOIN outreach.send_log s ON s.email_id = e.id
            JOIN outreach.leads l ON l.id = e.lead_id JOIN outreach.mailboxes m ON m.id = e.mailbox_id
            ORDER BY e.id""")
        for variant, n in REPLIES.items():
            for r in [r for r in sent if r["variant"] == variant][:n]:
                accounts.append(r["imap_conn_id"], mail(r["email"], "Re: your email",
                                                        "Interested, call me Tuesday.",
                                                        headers={"In-Reply-To": f"<{r['message_id']}>"}))
        inbox = run(db_url, tmp_path, "inbox")
        assert sum(int(w.split("=")[1]) for w in inbox.split() if w.startswith("replies=")) == 3, inbox
        assert scalar(db_url, "SELECT count(*) FROM outreach.enrollments WHERE status = %s",
                      ("replied",)) == 3

        # The report, then the page in the browser: the same figures.
        report = json.loads(run(db_url, tmp_path, "report", "--json"))
        [step] = [s for s in report["variants"] if s["campaign"] == KEY]
        got = {v["variant"]: v for v in step["variants"]}
        assert {k: v["sent"] for k, v in got.items()} == subjects
        assert {k: v["replied"] for k, v in got.items()} == REPLIES
        driver.get(f"{page_url}/")
        table = wait.until(ec.presence_of_element_located((By.ID, f"variants-{KEY}-1")))
        prefix = f"variants.{KEY}.1."
        page = {k.removeprefix(prefix): v for k, v in browser.figures(driver).items()
                if k.startswith(prefix)}

        def pct(x):
            return f"{x * 100:.2f} %"

        expected = {}
        for name, v in got.items():
            expected[f"{name}.variant"] = name
            for k in ("sent", "replied", "bounced", "unsubscribed", "complained"):
                expected[f"{name}.{k}"] = str(v[k])
            expected[f"{name}.reply_rate"] = pct(v["reply_rate"])
            expected[f"{name}.interval"] = f"{pct(v['reply_rate_low'])} to {pct(v['reply_rate_high'])}"
        assert page == expected
        verdict = driver.find_element(By.CSS_SELECTOR, f'p[data-k="variants.{KEY}.1.verdict"]')
        assert verdict.text == step["verdict"]
        assert browser.figures(driver)[f"progress.{KEY}.status"] == "active"
        driver.execute_script("arguments[0].scrollIntoView()", table.find_element(
            By.XPATH, "preceding::h2[1]"))
        driver.save_screenshot(str(doc_images() / "first-campaign-variants.png"))
    finally:
        driver.quit()
