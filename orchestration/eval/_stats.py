"""The pass rate's uncertainty: a 95% Wilson score interval.

A dozen cases say little: 10 of 12 passing is a rate somewhere between about 55% and
95%. The Wilson interval (unlike the normal approximation) stays inside [0, 1] and is
honest at small counts and at rates near 0 or 1, which is where evals live.
"""

from __future__ import annotations

import math

__all__ = ["Z_95", "wilson_interval"]

Z_95 = 1.959963984540054
"""The standard normal quantile of 97.5%: a two-sided 95% interval."""


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``trials`` (``(0, 1)`` for none)."""
    if trials <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes out of {trials} trials")
    p = successes / trials
    z2 = z * z
    denominator = 1 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denominator
    # at the ends the interval touches 0 or 1 exactly (rounding would leave 0.9999999…)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return (low, high)
