"""A/B variant statistics: each variant's reply rate with a 95 % interval, and whether the
difference is significant yet. Pure functions.

Wilson's score interval (Wilson 1927; Brown, Cai & DasGupta, Statistical Science 16, 2001: better
than Wald for small counts and rates near 0); the pooled two-proportion z-test, two-sided, α = 0.05,
between the best and the worst variant."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054
"""The two-sided 95 % quantile of the standard normal distribution."""
ALPHA = 0.05
"""The significance level of :func:`two_proportion_z_test`'s verdict."""


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float] | None:
    """Return Wilson's score interval ``(low, high)`` (fractions, 0 to 1) for ``successes`` of
    ``trials``; ``None`` when ``trials`` is 0 (no rate to bound).

    :param z: the normal quantile (default 95 %, two-sided).
    :raises ValueError: a count is negative or ``successes > trials``.
    """
    if successes < 0 or trials < 0 or successes > trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return None
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class ZTest:
    """A pooled two-proportion z-test: ``z`` (rate 1 minus rate 2 over the pooled standard
    error), the two-sided ``p`` value, and ``significant`` (``p < ALPHA``)."""

    z: float
    p: float
    significant: bool


def two_proportion_z_test(x1: int, n1: int, x2: int, n2: int) -> ZTest | None:
    """Return the pooled two-proportion z-test of ``x1``/``n1`` against ``x2``/``n2``, or ``None``
    when it cannot be asked (a group without trials, or no variation at all: every trial of both
    a success, or none).

    :raises ValueError: a count is negative or successes exceed trials.
    """
    for x, n in ((x1, n1), (x2, n2)):
        if x < 0 or n < 0 or x > n:
            raise ValueError(f"need 0 <= successes <= trials, got {x} of {n}")
    if n1 == 0 or n2 == 0:
        return None
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return None
    z = (x1 / n1 - x2 / n2) / se
    p = math.erfc(abs(z) / math.sqrt(2))
    return ZTest(z, p, p < ALPHA)


def compare_variants(step: list[dict[str, Any]]) -> dict[str, Any]:
    """Add ``reply_rate`` and ``reply_rate_low``/``_high`` (the Wilson interval; ``None`` before
    the first send) to each variant of one step (dicts with ``variant``, ``sent``, ``replied``),
    and return the step's verdict: ``{"best", "worst", "z", "p", "significant", "verdict"}``,
    ``verdict`` a plain sentence (best and worst by reply rate, ``None`` until two variants were
    sent and their rates differ).
    """
    for v in step:
        iv = wilson_interval(v["replied"], v["sent"])
        v["reply_rate"] = v["replied"] / v["sent"] if v["sent"] else None
        v["reply_rate_low"], v["reply_rate_high"] = iv if iv else (None, None)
    ranked = sorted(step, key=lambda v: (-(v["reply_rate"] or 0.0), v["variant"]))
    best, worst = ranked[0], ranked[-1]
    test = (two_proportion_z_test(best["replied"], best["sent"], worst["replied"], worst["sent"])
            if len(ranked) > 1 else None)
    # A best and a worst only once two variants were sent and their rates differ (before, the
    # names' order picked them: "best: late" with nothing sent).
    sent = [v for v in step if v["sent"]]
    ranks = len(sent) > 1 and len({v["reply_rate"] for v in sent}) > 1
    if not sent:
        verdict = "no sends yet: nothing to compare"
    elif test is None:
        verdict = "not yet significant: too few sends or replies to compare the variants"
    elif test.significant:
        verdict = (f"significant: {best['variant']} gets more replies than {worst['variant']} "
                   f"(p = {test.p:.3f} < {ALPHA})")
    else:
        verdict = (f"not yet significant: the difference between {best['variant']} and "
                   f"{worst['variant']} may be chance (p = {test.p:.3f}, needs < {ALPHA})")
    return {"best": best["variant"] if ranks else None,
            "worst": worst["variant"] if ranks else None,
            "z": test.z if test else None, "p": test.p if test else None,
            "significant": bool(test and test.significant), "verdict": verdict}
