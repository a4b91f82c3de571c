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


def arms_order(i: int, n: int) -> tuple[int, ...]:
    """The order of ``n`` arms in pass ``i``. Two arms alternate, as :func:`interleave` does.
    From three arms on, passes come in twos: one order, then the same reversed, the order
    rotated by one from each two to the next (012 210 120 021 201 102). So every pair runs in
    both orders equally often after any even number of passes (a look may stop the rounds at
    any count: 8, 10, 17...), one apart after an odd one, and each arm is first as often as
    the others every ``2n`` passes."""
    if n <= 2:
        r = i % n
        return tuple(range(r, n)) + tuple(range(r))
    r = (i // 2) % n
    order = tuple(range(r, n)) + tuple(range(r))
    return order[::-1] if i % 2 else order


@dataclass(frozen=True)
class Arms:
    """Interleaved passes of several arms (:func:`interleave_arms`): one run of each a pass."""

    samples: tuple[tuple[float, ...], ...]  # per arm, per pass: seconds
    orders: tuple[tuple[int, ...], ...]  # per pass: the arms in the order they ran
    confidence: float  # of each look the passes were planned for

    def pair(self, a: int, b: int) -> ABResult:
        """Arm ``b`` against arm ``a`` over the same passes: per pass ``t_a / t_b`` (> 1: ``b``
        is faster), the interval at the passes' confidence."""
        ratios = [_ratio(x, y) for x, y in zip(self.samples[a], self.samples[b], strict=True)]
        lo, hi, coverage = median_ci(ratios, confidence=self.confidence)
        first = tuple("a" if o.index(a) < o.index(b) else "b" for o in self.orders)
        return ABResult(tuple(ratios), tuple((t,) for t in self.samples[a]),
                        tuple((t,) for t in self.samples[b]), first, lo, hi, coverage,
                        self.confidence)


def interleave_arms(runs: Sequence[Callable[[], float]], *, passes: int = 7,
                    max_passes: int | None = None, band: float = NOISE_BAND) -> Arms:
    """Several measured callables (each returns the seconds of one timed run) in interleaved
    passes, one run of each a pass in the order :func:`arms_order` gives, so that drift hits
    every arm alike. Arm 0 is the baseline and arm 1 the candidate the caller decides on:
    the looks (:func:`~.verdict.looks`) and the stop are those of :func:`interleave` on the
    pair (0, 1) (with two arms alone, :meth:`Arms.pair` is what :func:`interleave` with one
    run a pass would give); the other arms ride along in the same passes, their pairs at the
    same confidence."""
    if len(runs) < 2:
        raise ConfigError(f"{len(runs)} arm(s) to interleave",
                          hint="give the baseline, the candidate and any other arms")
    plan = looks(passes, max_passes)
    samples: list[list[float]] = [[] for _ in runs]
    orders: list[tuple[int, ...]] = []
    for upto in plan.at():
        while len(orders) < upto:
            order = arms_order(len(orders), len(runs))
            for k in order:
                samples[k].append(float(runs[k]()))
            orders.append(order)
        if decided([_ratio(a, b) for a, b in zip(samples[0], samples[1], strict=True)], band,
                   plan.confidence):
            break
    return Arms(tuple(tuple(s) for s in samples), tuple(orders), plan.confidence)


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
