"""The speed verdict simulated with no machine in the way: both sides of an interleaved
comparison draw log-normal run times, so a self-comparison called faster or slower is an
error of the procedure itself. Used by ``benchmarks/verdict_error_rate.py`` (the table) and
``tests/harness/test_verdict_rates.py`` (its bounds)."""

from __future__ import annotations

import random

from ..harness.compare import interleave
from ..harness.verdict import judge_ab


def simulated_verdicts(true: float, spread: float, runs: int, rng: random.Random
                       ) -> tuple[int, int, list[int]]:
    """(called faster, called slower, passes taken per comparison) over ``runs`` comparisons
    of a baseline with a candidate ``true`` times faster, both with log-normal run times of
    sigma ``spread``: 7 passes of 3 runs, up to 21 while inconclusive, as ``integrity
    validate`` measures."""
    faster = slower = 0
    passes = []
    for _ in range(runs):
        ab = interleave(lambda: 1e-3 * rng.lognormvariate(0.0, spread),
                        lambda: 1e-3 / true * rng.lognormvariate(0.0, spread),
                        passes=7, per_pass=3, max_passes=21)
        j = judge_ab(ab)
        faster += j.faster
        slower += j.slower
        passes.append(ab.passes)
    return faster, slower, passes
