"""The campaign page's server time on the demo data (issue 30: 2.1-3.6 s, ~1.3 s of it
PostgreSQL JIT-compiling ``report_mailbox_days``): ``GET /`` of the page's own app
(:func:`outreach.web.campaign_page.create_app`, in process, without Airflow's login in front)
against the same page with the report's queries left to the server's JIT setting (the
baseline: what it was before ``report_jit_off``). Target: ≤ 300 ms.
"""

from __future__ import annotations

from pathlib import Path

from common import Row, Server, Stopwatch, median_of, run
from outreach.queue import queue_due

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.300


def bench(server: Server, workdir: Path, *, repeats: int) -> tuple[list[Row], list[str]]:
    """Time the page (median of ``repeats`` after one warm-up) with and without JIT off.

    :raises RuntimeError: the page did not answer 200.
    """
    from fastapi.testclient import TestClient

    from outreach.leads import import_leads
    from outreach.store import reports
    from outreach.suppression import import_suppressions
    from outreach.web.campaign_page import create_app

    url = server.migrated("page")
    data = ROOT / "include" / "data"
    import_suppressions(url, data / "do_not_contact.csv")
    import_leads(url, ROOT / "include" / "campaigns" / "demo.yaml", ROOT / "include" / "mailboxes.yaml",
                 data / "sample_leads.csv")
    queued = queue_due(url)["queued"]
    client = TestClient(create_app(lambda: url))

    def once() -> float:
        with Stopwatch() as t:
            r = client.get("/")
        if r.status_code != 200:
            raise RuntimeError(f"campaign page: {r.status_code} {r.text[:300]}")
        return t.seconds

    once()  # warm-up: imports, first connection
    ours, _ = median_of(repeats, once)
    jit_off = reports.report_jit_off
    reports.report_jit_off = lambda conn: run(conn, "bench_jit_on")  # the baseline
    try:
        once()
        base, _ = median_of(repeats, once)
    finally:
        reports.report_jit_off = jit_off
    server.drop("page")
    import os

    load = os.getloadavg()[0]
    details = [f"campaign page: demo data ({queued} queued), ours {ours * 1000:.0f} ms, "
               f"with JIT on {base * 1000:.0f} ms (median of {repeats})"]
    return [Row("campaign page (server time, demo data)", f"{ours * 1000:.0f} ms",
                f"report queries with JIT on {base * 1000:.0f} ms → ours **{ours / base:.2f}×**",
                "≤ 300 ms", ours <= TARGET_S,
                "" if ours <= TARGET_S else
                f"load average {load:.1f} on {os.cpu_count()} cores during the run: the page is "
                "14 queries on two connections, each waiting for a core")], details
