"""Interleaved A/B comparison: drift on a shared machine hits both sides of every ratio.

Each pass runs A and B alternately, ``per_pass`` times each (A B A B ... or B A B A ...; the side
that goes first alternates between passes so order bias cancels), and yields one ratio
``median(A) / median(B)``: the speedup of B over A. The result is the median of the per-pass
ratios, with the distribution-free confidence interval of that median
(:func:`~.stats.median_ci`: no assumption on the shape of the noise, which a shared machine
makes anything but normal) at the confidence of its look (:attr:`ABResult.confidence`).

Looks (:func:`~.verdict.looks`): the first after enough passes for an interval at the
per-look confidence (``max(passes, min_passes(...))``: 8 for one look at 99%, 10 of three);
with ``max_passes`` above that, ``passes`` more before each later look while
:func:`~.verdict.decided` says the verdict is still inconclusive (the interval straddles the
noise band), up to ``max_passes`` in all: 10, 17, 21 for the usual 7 passes up to 21. Each look
is at the confidence :func:`~.verdict.per_look` gives for the looks actually scheduled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import ConfigError
from .stats import median, median_ci
from .verdict import NOISE_BAND, decided, looks


@dataclass(frozen=True)
class ABResult:
    """The outcome of an interleaved comparison of A (baseline) and B (candidate)."""

    ratios: tuple[float, ...]  # per pass: median(A) / median(B)
    samples_a: tuple[tuple[float, ...], ...]  # per pass, raw seconds
    samples_b: tuple[tuple[float, ...], ...]
    first: tuple[str, ...]  # per pass: which side ran first, "a" or "b"
    ci_low: float
    ci_high: float
    coverage: float | None = None  # the interval's exact confidence (None: not known)
    confidence: float | None = None  # the confidence it was asked for (per look)

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
                "coverage": self.coverage, "confidence": self.confidence,
                "ratios": list(self.ratios), "passes": self.passes, "first": list(self.first),
                "median_a": self.median_a, "median_b": self.median_b,
                "samples_a": [list(p) for p in self.samples_a],
                "samples_b": [list(p) for p in self.samples_b]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ABResult:
        """The comparison :meth:`to_json` wrote (another process's, for one)."""
        return cls(tuple(float(r) for r in d["ratios"]),
                   tuple(tuple(float(s) for s in p) for p in d["samples_a"]),
                   tuple(tuple(float(s) for s in p) for p in d["samples_b"]),
                   tuple(str(f) for f in d.get("first", ())), float(d["ci_low"]),
                   float(d["ci_high"]), d.get("coverage"), d.get("confidence"))


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a <= 0 else float("inf")


def _pass(run_a: Callable[[], float], run_b: Callable[[], float], per_pass: int,
          a_first: bool) -> tuple[list[float], list[float]]:
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(per_pass):
        if a_first:
            ta.append(float(run_a()))
            tb.append(float(run_b()))
        else:
            tb.append(float(run_b()))
            ta.append(float(run_a()))
    return ta, tb


def interleave(run_a: Callable[[], float], run_b: Callable[[], float], *, passes: int = 7,
               per_pass: int = 3, seed: int = 0, max_passes: int | None = None,
               band: float = NOISE_BAND, judged: bool = True) -> ABResult:
    """Compare two measured callables (each returns the seconds of one timed run); more
    passes, up to ``max_passes``, while the verdict is inconclusive (module docstring).
    ``judged=False``: exactly ``passes`` passes (then more up to ``max_passes``), for an
    estimate no verdict is drawn from (its interval may fall short of its confidence).
    ``seed`` is kept for callers of the earlier bootstrap interval: the interval is exact."""
    del seed
    if per_pass < 1:
        raise ConfigError(f"per_pass={per_pass} must be >= 1",
                          hint="the defaults are 7 passes of 3 runs of each side")
    plan = looks(passes, max_passes, judged=judged)
    ratios: list[float] = []
    all_a: list[tuple[float, ...]] = []
    all_b: list[tuple[float, ...]] = []
    first: list[str] = []
    confidence = plan.confidence
    for upto in plan.at():
        while len(ratios) < upto:
            a_first = len(ratios) % 2 == 0
            ta, tb = _pass(run_a, run_b, per_pass, a_first)
            ratios.append(_ratio(median(ta), median(tb)))
            all_a.append(tuple(ta))
            all_b.append(tuple(tb))
            first.append("a" if a_first else "b")
        if decided(ratios, band, confidence):
            break
    lo, hi, coverage = median_ci(ratios, confidence=confidence)
    return ABResult(tuple(ratios), tuple(all_a), tuple(all_b), tuple(first), lo, hi, coverage,
                    confidence)


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
