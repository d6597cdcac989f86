"""Benchmark: outreach's send path against a raw smtplib baseline, measured in the same run.

    make bench N=2000

Both sides hand the same number of messages to the same in-memory SMTP server on loopback over
one SMTP session per batch. The raw baseline only serialises and sends; outreach also claims,
re-checks suppression, renders, records each outcome in PostgreSQL. The report is a ratio, never
a timed assertion.
"""

from __future__ import annotations

import os
import smtplib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="outreach-bench-airflow-"))

import psycopg  # noqa: E402

from faultsmtp import FaultSMTPServer  # noqa: E402
from outreach import embedded  # noqa: E402
from outreach.airflow_adapter import smtp_connector  # noqa: E402
from outreach.leads import import_leads  # noqa: E402
from outreach.message import to_wire  # noqa: E402
from outreach.migrate import upgrade  # noqa: E402
from outreach.queue import queue_due  # noqa: E402
from outreach.send import prepare, send_batch  # noqa: E402
from outreach.settings import Settings  # noqa: E402
from outreach.transport import dot_stuff  # noqa: E402


def main(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="outreach-bench-"))
    admin = os.environ.get("OUTREACH_TEST_ADMIN_URL") or embedded.start(tmp / "pg", stop_at_exit=True)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS outreach_bench")
    url = embedded.ensure_database(admin, "outreach_bench")
    upgrade(url)
    csv = tmp / "leads.csv"
    csv.write_text("Email,First Name,Company\n" + "".join(f"b{i}@bench.example,Bo,Bench {i}\n" for i in range(n)))
    t = time.perf_counter()
    import_leads(url, ROOT / "include/campaigns/demo.yaml", ROOT / "include/mailboxes.yaml", csv)
    queue_due(url)
    t_import = time.perf_counter() - t
    with psycopg.connect(url) as c:
        c.execute("UPDATE outreach.mailboxes SET daily_cap = 1000000, warmup_start = NULL")
    settings = Settings(public_url="https://unsubscribe.bench.example", unsubscribe_secret="bench-secret-0123456789",
                        batch_size=100, smtp_timeout=5)
    with FaultSMTPServer() as smtp:
        for conn_id in ("outreach_smtp_anna", "outreach_smtp_ben"):
            os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = smtp.connection_json()
        # Raw baseline: prebuilt messages, one session per 100, plain smtplib.sendmail.
        import datetime as dt

        sample = {"id": 1, "email": "x@bench.example", "first_name": "Bo", "last_name": "", "company": "B",
                  "title": "", "mailbox_name": "Anna", "mailbox_address": "anna.schmidt@mail.outreach-demo.example",
                  "campaign_key": "q4-ops-intro", "campaign_name": "Q4", "step_position": 1,
                  "template": "ops_intro", "subject": "{{ lead.company }}", "idempotency_key": "k",
                  "mailbox_id": 1}
        _, payload = prepare(sample, settings, dt.datetime.now(dt.timezone.utc))
        t = time.perf_counter()
        for start in range(0, n, 100):
            with smtplib.SMTP(smtp.host, smtp.port) as s:
                for i in range(start, min(n, start + 100)):
                    s.sendmail(sample["mailbox_address"], [f"raw{i}@bench.example"], payload)
        t_raw = time.perf_counter() - t
        raw_count = len(smtp.messages())
        t = time.perf_counter()
        sent = 0
        for mailbox in (1, 2):
            while (b := send_batch(url, mailbox, 100, smtp_connector, settings)).claimed:
                sent += b.sent
        t_out = time.perf_counter() - t
    assert sent == n and raw_count == n, (sent, raw_count)
    print(f"bench send: n={n}  raw smtplib {n / t_raw:,.0f} msg/s  outreach {n / t_out:,.0f} msg/s  "
          f"ratio outreach/raw = {t_raw / t_out:.2f}  (import+queue {n / t_import:,.0f} leads/s)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
