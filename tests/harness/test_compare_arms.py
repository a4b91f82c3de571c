"""Interleaved passes of several arms (harness/compare.py ``interleave_arms``): one run of each
arm a pass in a rotating order, the stop and the looks those of the first pair, each pair's
ratios over the same passes."""

from __future__ import annotations

import itertools

import pytest

from kernforge.core import ConfigError
from kernforge.harness import interleave, interleave_arms
from kernforge.harness.compare import arms_order


def _arm(label: str, t: float, calls: list[str]):
    def f() -> float:
        calls.append(label)
        return t
    return f


def test_three_arms_rotate_and_each_pair_runs_in_both_orders_alike() -> None:
    six = [arms_order(i, 3) for i in range(6)]
    assert six == [(0, 1, 2), (2, 1, 0), (1, 2, 0), (0, 2, 1), (2, 0, 1), (1, 0, 2)]
    assert sorted(six) == sorted(itertools.permutations(range(3)))  # every order once
    for a, b in itertools.combinations(range(3), 2):
        assert sum(o.index(a) < o.index(b) for o in six) == 3
    assert [o[0] for o in six].count(0) == 2  # each arm first as often
    assert [arms_order(i, 2) for i in range(4)] == [(0, 1), (1, 0)] * 2  # as interleave


@pytest.mark.parametrize("n", [3, 4, 5])
def test_every_pair_is_balanced_wherever_a_look_stops_the_rounds(n: int) -> None:
    """A look stops at 8, 9, 10, 15, 17, 21... passes, rarely a multiple of n!: after any
    number of passes each pair has run in each order as often, give or take one."""
    for stop in range(1, 64):
        orders = [arms_order(i, n) for i in range(stop)]
        assert all(sorted(o) == list(range(n)) for o in orders)
        for a, b in itertools.combinations(range(n), 2):
            first = sum(o.index(a) < o.index(b) for o in orders)
            assert abs(2 * first - stop) <= 1, (n, stop, a, b, first)
        leads = [sum(o[0] == k for o in orders) for k in range(n)]
        assert max(leads) - min(leads) <= 2, (n, stop, leads)


def test_the_pairs_are_taken_over_the_same_passes() -> None:
    calls: list[str] = []
    got = interleave_arms([_arm("o", 3.0, calls), _arm("f", 1.0, calls),
                           _arm("l", 2.0, calls)], passes=2)
    assert len(got.orders) == 8  # the first look: enough passes for a 99% interval
    assert "".join(calls[:9]) == "ofl" "lfo" "flo"
    fused, one, vs = got.pair(0, 1), got.pair(0, 2), got.pair(2, 1)
    assert fused.speedup == 3.0 and one.speedup == 1.5 and vs.speedup == 2.0
    assert fused.passes == one.passes == vs.passes == 8
    assert vs.samples_a == ((2.0,),) * 8 and vs.samples_b == ((1.0,),) * 8
    assert vs.first == ("b", "a", "b", "a", "a", "b", "b", "a")  # l first in 1 of each 2
    assert vs.confidence == fused.confidence and vs.ci_low == vs.ci_high == 2.0


def test_the_rounds_stop_on_the_first_pair_alone() -> None:
    """The one-launch arm's noise does not buy the comparison more rounds: the looks go on
    while original against candidate is inconclusive, and only then."""
    even = iter([1.0, 0.95] * 50)  # ratios 1.0 and 1.05: straddles 1.02, inconclusive
    got = interleave_arms([lambda: 1.0, lambda: next(even), lambda: 0.5], passes=7,
                          max_passes=21)
    assert len(got.orders) == 21
    clear = interleave_arms([lambda: 2.0, lambda: 1.0, lambda: next(even)], passes=7,
                            max_passes=21)
    assert len(clear.orders) == 10


def test_two_arms_are_the_ab_comparison() -> None:
    a = iter([1.0, 1.2, 0.9, 1.1, 1.3, 1.0, 1.2, 0.8, 1.1, 1.0] * 3)
    b = iter([0.5, 0.6, 0.55, 0.5, 0.7, 0.45, 0.5, 0.6, 0.5, 0.55] * 3)
    xs, ys = list(a), list(b)
    got = interleave_arms([iter(xs).__next__, iter(ys).__next__], passes=7).pair(0, 1)
    ab = interleave(iter(xs).__next__, iter(ys).__next__, passes=7, per_pass=1)
    assert got == ab


def test_too_few_arms() -> None:
    with pytest.raises(ConfigError, match="1 arm"):
        interleave_arms([lambda: 1.0], passes=7)
