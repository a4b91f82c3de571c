"""The three verdicts: a kernel against itself is never significant, whatever the load; a truly
faster one is found faster on a quiet machine and never called slower."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from kernforge.harness import interleave, median_ci
from kernforge.harness.verdict import (
    Judgement,
    Verdict,
    judge,
    judge_ab,
    judge_evidence,
    min_passes,
    per_look,
)


class Machine:
    """Seconds of one timed run on a shared machine: a load regime (1x to 3x slower) held for
    a random number of runs, log-normal jitter and, now and then, a 4x stall. ``regimes=False``:
    a quiet machine (jitter only)."""

    def __init__(self, seed: int, sigma: float, longest: int, regimes: bool = True) -> None:
        self.rng, self.sigma, self.longest, self.regimes = random.Random(seed), sigma, longest, \
            regimes
        self.left, self.factor = 0, 1.0

    def run(self, seconds: float) -> float:
        if self.regimes and self.left <= 0:
            self.left = self.rng.randint(1, self.longest)
            self.factor = self.rng.choice([1.0, 1.0, 1.3, 2.0, 3.0])
        self.left -= 1
        stall = 4.0 if self.regimes and self.rng.random() < 0.05 else 1.0
        return seconds * self.factor * stall * math.exp(self.rng.gauss(0.0, self.sigma))


def _compare(m: Machine, speedup: float) -> Judgement:
    ab = interleave(lambda: m.run(1e-3), lambda: m.run(1e-3 / speedup), passes=7, per_pass=3,
                    max_passes=21)
    return judge_ab(ab)


def test_median_ci_is_the_sign_test_interval() -> None:
    assert median_ci(range(8)) == (0.0, 7.0, pytest.approx(1 - 2 / 256))
    lo, hi, cov = median_ci(range(21))
    assert (lo, hi) == (4.0, 16.0) and cov == pytest.approx(0.9928, abs=1e-4)
    lo, hi, cov = median_ci(range(21), confidence=0.95)
    assert (lo, hi) == (5.0, 15.0) and cov == pytest.approx(0.9734, abs=1e-4)
    assert median_ci(range(7))[2] < 0.99  # too few: the caller must not conclude


@pytest.mark.parametrize("sigma,longest", [(0.02, 1), (0.02, 4), (0.02, 12), (0.1, 4),
                                            (0.1, 12), (0.3, 12)])
def test_a_kernel_against_itself_is_never_significant_under_changing_load(
        sigma: float, longest: int) -> None:
    verdicts = [_compare(Machine(seed, sigma, longest), 1.0) for seed in range(150)]
    assert not any(j.faster for j in verdicts)
    assert not any(j.slower for j in verdicts)


def test_a_kernel_against_itself_on_a_quiet_machine_is_within_the_band() -> None:
    verdicts = [_compare(Machine(seed, 0.01, 1, regimes=False), 1.0) for seed in range(200)]
    assert not any(j.faster or j.slower for j in verdicts)
    assert sum(j.verdict is Verdict.NOT_FASTER for j in verdicts) >= 180


def test_a_truly_faster_kernel_is_found_faster_when_quiet_and_never_slower() -> None:
    quiet = [_compare(Machine(seed, 0.03, 1, regimes=False), 1.2) for seed in range(200)]
    assert sum(j.faster for j in quiet) >= 0.95 * len(quiet)
    loaded = [_compare(Machine(seed, 0.1, 12), 1.2) for seed in range(100)]
    assert not any(j.verdict is Verdict.NOT_FASTER for j in quiet + loaded)


def test_more_passes_are_taken_while_inconclusive() -> None:
    m = Machine(3, 0.03, 1, regimes=False)
    few = interleave(lambda: m.run(1e-3), lambda: m.run(1e-3 / 1.03), passes=7, per_pass=3)
    more = interleave(lambda: m.run(1e-3), lambda: m.run(1e-3 / 1.03), passes=7, per_pass=3,
                      max_passes=21)
    assert few.passes == 8 and more.passes in (17, 21)  # first looks: 8 of one, 10 of three
    assert more.first == tuple("ab"[i % 2] for i in range(more.passes))  # across looks too
    clear = interleave(lambda: m.run(2e-3), lambda: m.run(1e-3), passes=7, max_passes=21)
    assert clear.passes == 10 and judge_ab(clear).faster


def test_busy_or_too_few_passes_is_inconclusive_with_its_reason() -> None:
    busy = judge([1.5] * 7, idle=False, utilisation=0.6)
    assert busy.verdict is Verdict.INCONCLUSIVE and "busy (60% busy)" in busy.reason
    few = judge([1.5] * 3)
    assert few.verdict is Verdict.INCONCLUSIVE and "too few" in few.reason
    wide = judge([0.9, 1.3, 1.0, 1.2, 0.95, 1.1, 1.05, 1.0])
    assert wide.verdict is Verdict.INCONCLUSIVE and "straddles" in wide.reason
    m = Machine(0, 0.3, 12)  # the runs spread: the load, not the kernel, is measured
    noisy = judge_ab(interleave(lambda: m.run(2e-3), lambda: m.run(1e-3), passes=7))
    assert noisy.verdict is Verdict.INCONCLUSIVE and "differ by" in noisy.reason


def test_verdicts_and_their_json() -> None:
    fast = judge([1.2, 1.21, 1.19, 1.22, 1.2, 1.18, 1.2, 1.2])
    assert fast.faster and fast.headline().startswith("faster 1.200x [1.180, 1.220]")
    assert "[99% CI 1.180, 1.220]" in fast.reason
    same = judge([1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.0, 1.0])
    assert same.verdict is Verdict.NOT_FASTER and not same.slower
    slow = judge([0.8] * 8)
    assert slow.slower and "slower" in slow.reason
    assert Judgement.from_json(fast.to_json()) == fast
    stored = judge_evidence(1.3, (1.25, 1.35))
    assert stored.faster and "[CI 1.250, 1.350]" in stored.reason  # its confidence unknown
    assert judge_evidence(None, None).verdict is Verdict.INCONCLUSIVE


@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99, per_look(3)])
def test_the_too_few_message_names_the_true_minimum(confidence: float) -> None:
    """The message said "measure with at least 7" where 6 passes reach 95%: the minimum is
    computed by median_ci's own rule, at the confidence the verdict used."""
    need = min_passes(confidence)
    assert median_ci(range(need), confidence=confidence)[2] >= confidence
    assert median_ci(range(need - 1), confidence=confidence)[2] < confidence
    few = judge([1.5] * (need - 1), confidence=confidence)
    assert few.verdict is Verdict.INCONCLUSIVE and f"at least {need}" in few.reason
    assert judge([1.5] * need, confidence=confidence).faster


def test_eight_passes_are_enough_at_99() -> None:
    assert min_passes() == 8 and min_passes(0.95) == 6
    assert "measure with at least 8" in judge([1.5] * 7).reason


def test_a_wide_interval_decides_only_when_it_lies_beyond_the_spread_a_load_makes() -> None:
    assert judge_evidence(1.3, (1.05, 1.8)).verdict is Verdict.INCONCLUSIVE
    assert "disagree" in judge_evidence(1.3, (1.05, 1.8)).reason
    far = judge_evidence(6.1, (5.8, 10.5))
    assert far.faster
    slow = judge_evidence(0.2, (0.1, 0.6))
    assert slow.verdict is Verdict.NOT_FASTER and slow.slower
    assert judge_evidence(0.7, (0.5, 0.9)).verdict is Verdict.INCONCLUSIVE


def test_a_load_that_came_and_went_between_passes_is_inconclusive() -> None:
    """Every pass tight (the per-pass spread is small) but most passes slowed by a load that
    came and went: the typical run lies far above the side's fastest."""
    from kernforge.harness.compare import ABResult

    quiet, loaded = (1.0, 1.01, 1.0), (15.0, 15.1, 15.0)
    a = (quiet, loaded, loaded, loaded, quiet, loaded, loaded)
    b = tuple(tuple(t * 1.06 for t in p) for p in a)
    ratios = tuple(statistics.median(pb) / statistics.median(pa) for pa, pb in zip(a, b))
    lo, hi, cov = median_ci(ratios, confidence=0.95)
    ab = ABResult(ratios, a, b, ("a", "b") * 3 + ("a",), lo, hi, cov, 0.95)
    j = judge_ab(ab)
    assert j.verdict is Verdict.INCONCLUSIVE and "more than its fastest" in j.reason
    assert "[95% CI " in j.reason  # the interval's own confidence
    steady = ABResult(ratios, (quiet,) * 7, tuple((1.06, 1.07, 1.06) for _ in range(7)),
                      ("a", "b") * 3 + ("a",), lo, hi, cov, 0.95)
    assert judge_ab(steady).verdict is not Verdict.INCONCLUSIVE
    far = ABResult((98.0,) * 7, a, tuple(tuple(t / 98 for t in p) for p in a),
                   ("a", "b") * 3 + ("a",), 94.0, 103.7, cov, 0.95)
    assert judge_ab(far).faster  # no load makes a 98x of the same kernels


def test_runs_that_spread_keep_a_verdict_far_beyond_the_band_and_only_that() -> None:
    """The spread rule, as the width and drift rules, leaves alone an interval wholly farther
    than MAX_WIDTH beyond the band: a side whose runs differ by 33% within a pass (a loaded
    machine, microsecond launches) measured 5.5x [4.9, 6.6]; load does not make a kernel
    4.9x faster than itself. Nearer the band the same spread is inconclusive, either way."""
    from kernforge.harness.compare import ABResult

    spread = tuple((1.0, 1.33, 1.1) for _ in range(8))

    def ab(ratio: float, lo: float, hi: float) -> ABResult:
        return ABResult((ratio,) * 8, spread, tuple(tuple(t / ratio for t in p) for p in spread),
                        ("a", "b") * 4, lo, hi, 0.992, 0.99)

    fast = judge_ab(ab(5.455, 4.878, 6.627))
    assert fast.faster, fast.reason
    slow = judge_ab(ab(0.18, 0.15, 0.2))
    assert slow.verdict is Verdict.NOT_FASTER and slow.slower, slow.reason
    for near in (ab(1.3, 1.2, 1.4), ab(0.7, 0.66, 0.75), ab(1.5, 1.45, 1.6)):
        j = judge_ab(near)
        assert j.verdict is Verdict.INCONCLUSIVE and "differ by 33%" in j.reason
    busy = judge_ab(ab(5.455, 4.878, 6.627), idle=False, utilisation=0.9, device="the GPU")
    assert busy.verdict is Verdict.INCONCLUSIVE  # a busy device concludes nothing, far or not
    assert "the GPU was busy (90% busy)" in busy.reason
