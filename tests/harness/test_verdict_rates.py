"""The verdict's own error rate, with no machine in the way: both sides draw log-normal run
times; a self-comparison called faster or slower is the procedure's error (issue 43: 2 of 200
CPU self-comparisons were significant at 95% per comparison, 0.60% by simulation at a 10%
spread). At 99% over the looks, with the first look after 10 passes, it stays below 0.2%."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from kernforge.harness import median_ci
from kernforge.harness.verdict import CONFIDENCE, looks, min_passes, per_look
from kernforge.testing.verdicts import simulated_verdicts


def _verdicts(true: float, spread: float, runs: int, seed: int) -> tuple[int, int, list[int]]:
    return simulated_verdicts(true, spread, runs, random.Random(seed))


@pytest.mark.slow  # 1500 simulated comparisons; the 1.2x test below is the quick one
def test_a_self_comparison_at_a_10_percent_spread_is_significant_below_0_2_percent() -> None:
    runs = 1500  # ~2.5 s; the earlier procedure (95%, first look at 7) errs in 8 of them
    faster, slower, passes = _verdicts(1.0, 0.10, runs, seed=43)
    assert (faster + slower) / runs < 0.002
    assert set(passes) <= {10, 17, 21}


def test_a_truly_1_2x_faster_side_is_found_faster_at_a_10_percent_spread() -> None:
    runs = 400
    faster, slower, passes = _verdicts(1.2, 0.10, runs, seed=44)
    assert faster >= 0.95 * runs and slower == 0
    assert sorted(passes)[runs // 2] == 10  # a clear 1.2x: decided at the first look


def test_the_looks_of_the_usual_comparison() -> None:
    plan = looks(7, 21)
    assert plan.at() == [10, 17, 21] and plan.count == 3
    assert plan.confidence == pytest.approx(per_look(3)) == pytest.approx(1 - 0.01 / 3)
    assert CONFIDENCE == 0.99
    one = looks(7)
    assert one.at() == [8] and one.confidence == pytest.approx(0.99)
    assert looks(7, 21, judged=False).at() == [7, 14, 21]


@pytest.mark.parametrize("passes", range(1, 13))
def test_every_schedule_counts_the_looks_it_takes_and_can_conclude_at_each(passes: int) -> None:
    for top in [None, *range(passes, 4 * passes + 12)]:
        plan = looks(passes, top)
        at = plan.at()
        assert plan.count == len(at)  # Bonferroni over the looks actually taken
        assert plan.confidence == pytest.approx(per_look(len(at)))
        assert at[0] >= max(passes, min_passes(plan.confidence))
        assert median_ci(range(at[0]), confidence=plan.confidence)[2] >= plan.confidence
        assert at[-1] == max(top or passes, at[0])
        assert all(b - a <= passes for a, b in pairwise(at))
