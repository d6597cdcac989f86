"""``outreach send --limit N`` limits the whole command (issue 31, item 4): every planned batch
and mailbox together, and every run of ``--until-empty``; counted at a real SMTP server."""

from __future__ import annotations

import re

import pytest

from outreach.leads import import_leads
from outreach.queue import plan_batches, queue_due
from support.flow import leads_csv, one_mailbox, outreach, scalar
from support.paths import CAMPAIGN, MAILBOXES, SMTP_CONN_IDS

BATCH = "2"  # OUTREACH_BATCH_SIZE: 12 due rows are several batches' worth


@pytest.fixture
def queued(db_url, tmp_path):
    import_leads(db_url, CAMPAIGN, MAILBOXES,
                 leads_csv(tmp_path, [f"p{i}@acme{i}.example" for i in range(12)]))
    one_mailbox(db_url)  # no cap or warm-up in the way: only --limit bounds the run
    assert queue_due(db_url)["queued"] == 12
    plan = plan_batches(db_url, int(BATCH), parallelism=4)
    assert len(plan) == 4  # the plan alone would claim 8 rows in one run


def _send(db_url, sink, tmp_path, *args):
    env = {f"AIRFLOW_CONN_{c.upper()}": sink.connection_json() for c in SMTP_CONN_IDS}
    p = outreach(db_url, "send", *args, OUTREACH_BATCH_SIZE=BATCH, **env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_send_limit_1_hands_over_exactly_one_message(db_url, sink, tmp_path, queued):
    out = _send(db_url, sink, tmp_path, "--limit", "1")
    assert len(sink.messages()) == 1
    assert sum(int(n) for n in re.findall(r" claimed=(\d+)", out)) == 1
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'") == 11


def test_send_limit_counts_every_run_of_until_empty(db_url, sink, tmp_path, queued):
    out = _send(db_url, sink, tmp_path, "--limit", "9", "--until-empty")
    assert len(sink.messages()) == 9
    assert "--limit 9 reached: claimed 9 row(s) in all" in out
    assert scalar(db_url, "SELECT count(*) FROM outreach.emails WHERE status = 'queued'") == 3


def test_send_limit_must_be_a_positive_number(db_url, tmp_path):
    for bad in ("0", "-1", "1_0", "x"):
        p = outreach(db_url, "send", "--limit", bad)
        assert p.returncode == 2 and "--limit" in p.stderr and "Traceback" not in p.stderr


def test_help_says_what_each_limit_counts(db_url, tmp_path):
    text = " ".join(outreach(db_url, "send", "--help").stdout.split())
    assert "rows (messages) the whole command claims at most" in text
    for limit in ("daily cap", "OUTREACH_BATCH_SIZE (rows one planned batch claims)",
                  "OUTREACH_SEND_PARALLELISM (planned batches per run)"):
        assert limit in text
