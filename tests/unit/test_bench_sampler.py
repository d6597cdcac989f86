"""The benchmarks' CPU figures (bench/common.py, Sampler): read from the first line of /proc/stat,
they must neither break the benchmark where that line is missing or short (another OS, a
sandbox) nor count time that was not this machine's work for its processes (Linux counts guest
time inside user and nice; steal is time the hypervisor ran something else)."""

from __future__ import annotations

import math

import pytest

from support.paths import ROOT


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import common

    class _Conn:
        def close(self) -> None:
            pass

    monkeypatch.setattr(common.psycopg, "connect", lambda *a, **k: _Conn())
    monkeypatch.setattr(common, "run", lambda *a, **k: [])
    return common


def _measure(common, monkeypatch, start: str, end: str):
    lines = iter([start, end])
    monkeypatch.setattr(common, "_read", lambda path: next(lines))
    with common.Sampler("postgresql:///unused", interval=10) as s:
        pass
    return s


@pytest.mark.parametrize("stat", ["", "intr 1 2 3\n", "cpu 10 20\n"])
def test_a_missing_or_short_proc_stat_is_reported_as_not_measured(common, monkeypatch, stat):
    s = _measure(common, monkeypatch, stat, stat)
    assert math.isnan(s.busy) and math.isnan(s.cpu_seconds)
    assert "not measured" in s.line(100), s.line(100)


def test_four_fields_as_old_kernels_write_them(common, monkeypatch):
    s = _measure(common, monkeypatch, "cpu 0 0 0 0\n", "cpu 100 0 50 850\n")
    assert s.busy == pytest.approx(0.15)


def test_guest_time_is_not_counted_twice_and_steal_is_not_our_cpu(common, monkeypatch):
    # user nice system idle iowait irq softirq steal guest guest_nice: user 100 includes guest 100
    s = _measure(common, monkeypatch, "cpu 0 0 0 0 0 0 0 0 0 0\n",
                 "cpu 100 0 50 700 50 0 0 100 100 0\n")
    assert s.busy == pytest.approx(150 / 1000)
    assert s.cpu_seconds == pytest.approx(150 / common.os.sysconf("SC_CLK_TCK"))
