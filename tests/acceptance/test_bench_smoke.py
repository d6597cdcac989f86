"""`make bench` at a tiny size, only to show that every benchmark works: it runs in the
benchmarks' own venv (.venv-bench, with the peers procrastinate and PgQueuer), and the results
file must have every row and no duplicate. No timing is asserted."""

from __future__ import annotations

import os
import subprocess

import pytest

from support.paths import ROOT

BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
ROWS = ("claim ×1", "claim ×2", "claim ×8", "claim with contact policy ×8", "send path",
        "DKIM signature",
        "send at 10 ms a command ×1", "send at 10 ms a command ×2", "import", "queue due",
        "Airflow fan-out (2 batches, 0 ms a command)")


def test_every_benchmark_runs_at_a_tiny_size(tmp_path):
    if not BENCH_PYTHON.exists():
        pytest.fail("no .venv-bench: run the suite with `make test` (it builds it)")
    out = tmp_path / "latest.md"
    env = dict(os.environ)
    if env.get("OUTREACH_TEST_ADMIN_URL"):
        env.setdefault("OUTREACH_BENCH_ADMIN_URL", env["OUTREACH_TEST_ADMIN_URL"])
    proc = subprocess.run(
        [str(BENCH_PYTHON), str(ROOT / "bench" / "run.py"), "--claim-rows", "200",
         "--claimers", "1,2,8", "--send-emails", "10", "--import-rows", "2000",
         "--fanout-tasks", "2", "--fanout-batch", "5", "--fanout-delay", "0",
         "--latency-delay", "0.01",
         "--latency-parallelism", "1,2", "--latency-batch", "4", "--repeats", "1", "--out", str(out),
         # the scale-out row starts three Airflow deployments: tests/acceptance/test_celery.py runs those
         "--only", "claim,send,latency,import,fanout"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    text = out.read_text()
    table = [ln for ln in text.splitlines() if ln.startswith("| ")]
    for row in ROWS:
        assert any(ln.startswith(f"| {row} |") for ln in table), (row, text)
    claims = [ln for ln in table if ln.startswith(("| claim ×", "| claim with"))]
    assert claims and all("; duplicates 0 |" in ln for ln in claims), claims
    assert "## Machine" in text and "PostgreSQL" in text and "procrastinate 3.10.0" in text
