"""Interleaved A/B: order alternates between passes; a 2x slower B gives ratio ~0.5."""

from __future__ import annotations

import json
import random

import pytest

from kernforge.core import ConfigError
from kernforge.harness import interleave


def test_order_alternates_between_passes():
    calls: list[str] = []

    def run(label: str, t: float):
        def f() -> float:
            calls.append(label)
            return t
        return f

    r = interleave(run("a", 2.0), run("b", 1.0), passes=4, per_pass=3, judged=False)
    assert calls == list("ababab" "bababa" "ababab" "bababa")
    assert r.first == ("a", "b", "a", "b")
    assert r.ratios == (2.0,) * 4 and r.speedup == 2.0 and r.passes == 4
    assert r.samples_a == ((2.0,) * 3,) * 4 and r.ci_low == r.ci_high == 2.0
    doc = r.to_json()
    json.dumps(doc)
    assert doc["speedup"] == 2.0 and doc["median_b"] == 1.0


def test_ratio_is_median_of_per_pass_ratios():
    a_times = iter([1.0, 3.0, 2.0] + [10.0, 10.0, 10.0] + [1.0, 1.0, 1.0])
    r = interleave(lambda: next(a_times), lambda: 1.0, passes=3, per_pass=3, judged=False)
    assert r.ratios == (2.0, 10.0, 1.0) and r.speedup == 2.0


def test_a_judged_comparison_looks_first_after_enough_passes_for_its_confidence():
    """Too few passes for a 99% interval would make every verdict "too few passes": the first
    look waits for the fewest that reach the per-look confidence (8 of one look at 99%)."""
    r = interleave(lambda: 2.0, lambda: 1.0, passes=5, per_pass=1)
    assert r.passes == 8 and r.confidence == pytest.approx(0.99)
    assert r.coverage is not None and r.coverage >= r.confidence


def _noisy(seconds: float, rng: random.Random):
    """A run of ``seconds`` with up to 10% jitter and, one run in ten, a 20x stall: the noise
    of a shared machine, made reproducible (real sleeps made this test depend on the load)."""
    def run() -> float:
        stall = 20.0 if rng.random() < 0.1 else 1.0
        return seconds * (1.0 + 0.1 * rng.random()) * stall
    return run


def test_two_times_slower_b_gives_half():
    rng = random.Random(7)
    r = interleave(_noisy(0.002, rng), _noisy(0.004, rng), passes=7, per_pass=3)
    assert 0.4 < r.speedup < 0.6
    assert r.ci_low <= r.speedup <= r.ci_high
    assert len(r.ratios) == 8  # the first look: enough passes for a 99% interval


def test_bad_counts():
    with pytest.raises(ConfigError):
        interleave(lambda: 1.0, lambda: 1.0, passes=0)
    with pytest.raises(ConfigError):
        interleave(lambda: 1.0, lambda: 1.0, passes=7, max_passes=6)
    with pytest.raises(ConfigError):
        interleave(lambda: 1.0, lambda: 1.0, per_pass=0)


def test_a_comparison_read_back_from_json_is_the_same():
    """Another process's comparison (a native unit's child) comes back whole: the verdict
    drawn from it is the one drawn from the original."""
    from kernforge.harness.compare import ABResult
    from kernforge.harness.verdict import judge_ab

    rng = random.Random(3)
    r = interleave(_noisy(0.002, rng), _noisy(0.004, rng), passes=7, per_pass=3)
    back = ABResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back == r
    assert judge_ab(back) == judge_ab(r)
