"""The A/B statistics against published and hand-computed values (no database)."""

from __future__ import annotations

import pytest

from outreach.abtest import compare_variants, two_proportion_z_test, wilson_interval


@pytest.mark.parametrize(("x", "n", "low", "high"), [
    (81, 263, 0.2553, 0.3662),  # Newcombe, Statistics in Medicine 17 (1998), table I, method 3
    (15, 148, 0.0624, 0.1605),  # the same table
    (0, 20, 0.0, 0.1611),       # the same table
    (1, 29, 0.0061, 0.1718),    # the same table
    (5, 10, 0.2366, 0.7634),
])
def test_wilson_interval_matches_the_published_values(x, n, low, high):
    lo, hi = wilson_interval(x, n)
    assert (round(lo, 4), round(hi, 4)) == (low, high)


def test_wilson_interval_without_trials_and_bad_counts():
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_pooled_two_proportion_z_test():
    # 45/100 against 30/100: pooled p = 0.375, SE = sqrt(0.375 * 0.625 * (1/100 + 1/100)).
    t = two_proportion_z_test(45, 100, 30, 100)
    assert t.z == pytest.approx(2.19089, abs=1e-5)
    assert t.p == pytest.approx(0.028460, abs=1e-5)
    assert t.significant
    t = two_proportion_z_test(12, 100, 8, 100)  # z = 0.9428, p = 0.3458
    assert (round(t.z, 4), round(t.p, 4), t.significant) == (0.9428, 0.3458, False)
    assert two_proportion_z_test(0, 50, 0, 50) is None  # no variation: nothing to test
    assert two_proportion_z_test(0, 0, 1, 5) is None  # a variant not sent yet


def test_the_verdict_is_plain_about_significance():
    step = [{"variant": "a", "sent": 100, "replied": 45}, {"variant": "b", "sent": 100, "replied": 30}]
    assert compare_variants(step)["verdict"].startswith("significant: a gets more replies than b")
    step = [{"variant": "a", "sent": 100, "replied": 12}, {"variant": "b", "sent": 100, "replied": 8}]
    verdict = compare_variants(step)
    assert not verdict["significant"]
    assert verdict["verdict"].startswith("not yet significant")
    assert step[0]["reply_rate"] == 0.12


def test_no_best_or_worst_before_two_variants_differ():
    fresh = [{"variant": "late", "sent": 0, "replied": 0}, {"variant": "question", "sent": 0, "replied": 0}]
    verdict = compare_variants(fresh)
    assert (verdict["best"], verdict["worst"], verdict["verdict"]) == (
        None, None, "no sends yet: nothing to compare")
    even = [{"variant": "a", "sent": 40, "replied": 0}, {"variant": "b", "sent": 40, "replied": 0}]
    assert (compare_variants(even)["best"], compare_variants(even)["worst"]) == (None, None)
    one = [{"variant": "a", "sent": 40, "replied": 3}, {"variant": "b", "sent": 0, "replied": 0}]
    assert compare_variants(one)["best"] is None
    apart = [{"variant": "a", "sent": 40, "replied": 3}, {"variant": "b", "sent": 40, "replied": 1}]
    assert (compare_variants(apart)["best"], compare_variants(apart)["worst"]) == ("a", "b")
