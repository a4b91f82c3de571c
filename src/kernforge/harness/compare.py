"""Interleaved A/B comparison: drift on a shared machine hits both sides of every ratio.

Each pass runs A and B alternately, ``per_pass`` times each (A B A B ... or B A B A ...; the side
that goes first alternates between passes so order bias cancels), and yields one ratio
``median(A) / median(B)``: the speedup of B over A. The result is the median of the per-pass
ratios, with a bootstrap confidence interval of that median.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import ConfigError
from .stats import bootstrap_ci, median


@dataclass(frozen=True)
class ABResult:
    """The outcome of an interleaved comparison of A (baseline) and B (candidate)."""

    ratios: tuple[float, ...]  # per pass: median(A) / median(B)
    samples_a: tuple[tuple[float, ...], ...]  # per pass, raw seconds
    samples_b: tuple[tuple[float, ...], ...]
    first: tuple[str, ...]  # per pass: which side ran first, "a" or "b"
    ci_low: float
    ci_high: float

    @property
    def speedup(self) -> float:
        """Median of the per-pass ratios: > 1 means B is faster than A."""
        return median(self.ratios)

    @property
    def passes(self) -> int:
        return len(self.ratios)

    @property
    def median_a(self) -> float:
        return median([s for p in self.samples_a for s in p])

    @property
    def median_b(self) -> float:
        return median([s for p in self.samples_b for s in p])

    def to_json(self) -> dict[str, Any]:
        return {"speedup": self.speedup, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "ratios": list(self.ratios), "passes": self.passes, "first": list(self.first),
                "median_a": self.median_a, "median_b": self.median_b,
                "samples_a": [list(p) for p in self.samples_a],
                "samples_b": [list(p) for p in self.samples_b]}


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a <= 0 else float("inf")


def interleave(run_a: Callable[[], float], run_b: Callable[[], float], *, passes: int = 7,
               per_pass: int = 3, seed: int = 0) -> ABResult:
    """Compare two measured callables (each returns the seconds of one timed run)."""
    if passes < 1 or per_pass < 1:
        raise ConfigError(f"passes={passes} and per_pass={per_pass} must both be >= 1",
                          hint="the defaults are 7 passes of 3 runs of each side")
    ratios: list[float] = []
    all_a: list[tuple[float, ...]] = []
    all_b: list[tuple[float, ...]] = []
    first: list[str] = []
    for p in range(passes):
        a_first = p % 2 == 0
        ta: list[float] = []
        tb: list[float] = []
        for _ in range(per_pass):
            if a_first:
                ta.append(float(run_a()))
                tb.append(float(run_b()))
            else:
                tb.append(float(run_b()))
                ta.append(float(run_a()))
        ratios.append(_ratio(median(ta), median(tb)))
        all_a.append(tuple(ta))
        all_b.append(tuple(tb))
        first.append("a" if a_first else "b")
    lo, hi = bootstrap_ci(ratios, seed=seed)
    return ABResult(tuple(ratios), tuple(all_a), tuple(all_b), tuple(first), lo, hi)


def round_robin(runs: Sequence[Callable[[], float]], *, passes: int) -> list[list[float]]:
    """Several measured callables in ``passes`` passes, each pass one run of every callable in
    the order given: per callable, its samples (drift spreads over all of them alike)."""
    if passes < 1 or not runs:
        raise ConfigError(f"passes={passes} over {len(runs)} runner(s)",
                          hint="at least one pass over at least one runner")
    samples: list[list[float]] = [[] for _ in runs]
    for _ in range(passes):
        for i, run in enumerate(runs):
            samples[i].append(float(run()))
    return samples
