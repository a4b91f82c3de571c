"""Statistics every reported number goes through: median, geomean, confidence intervals.

:func:`median_ci` is the interval kernforge judges speedups by: distribution-free (the order
statistics that bracket the median, from the binomial distribution: the inversion of the sign
test), so it assumes nothing about the shape of the noise, only that the units (interleaved
passes) are exchangeable. :func:`bootstrap_ci` stays for summaries over many units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..core import ConfigError
from ..core.verdict import median_ci

__all__ = ["bootstrap_ci", "by_precision", "geomean", "median", "median_ci", "precision_of",
           "summarize"]


def _array(samples: Sequence[float], what: str) -> np.ndarray:
    a = np.asarray(samples, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ConfigError(f"the {what} of no samples is undefined",
                          hint="measure at least one run (repeat >= 1)")
    return a


def median(samples: Sequence[float]) -> float:
    """The median of ``samples`` (at least one)."""
    return float(np.median(_array(samples, "median")))


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive ``values`` (speedups, ratios, times)."""
    a = _array(values, "geometric mean")
    if bool((a <= 0).any()) or not bool(np.isfinite(a).all()):
        raise ConfigError("a geometric mean needs finite, positive values",
                          hint="leave failed (inf) or zero measurements out first")
    return float(math.exp(float(np.mean(np.log(a)))))


def bootstrap_ci(samples: Sequence[float], *, n: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap confidence interval of the median (seeded: reproducible)."""
    a = _array(samples, "confidence interval")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence={confidence} must be between 0 and 1",
                          hint="use e.g. 0.95")
    if n < 1:
        raise ConfigError(f"n={n} bootstrap resamples must be >= 1", hint="use e.g. 2000")
    if a.size == 1:
        return float(a[0]), float(a[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n, a.size))
    medians = np.median(a[idx], axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(medians, [tail, 100.0 - tail])
    return float(lo), float(hi)


def summarize(samples: Sequence[float], *, n: int = 2000, seed: int = 0) -> dict[str, float]:
    """``median``, ``min``, ``max``, ``n`` and the bootstrap CI (``ci_low``, ``ci_high``)."""
    a = _array(samples, "summary")
    lo, hi = bootstrap_ci(a.tolist(), n=n, seed=seed)
    return {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
            "n": int(a.size), "ci_low": lo, "ci_high": hi}


def precision_of(dtypes: Sequence[str]) -> str:
    """The precision label of a result from the dtypes of its written buffers: ``fp16``,
    ``fp32``, ``fp64`` (``bf16``, ``int``, ``other``), or ``mixed`` when they disagree."""
    labels = set()
    for d in dtypes:
        dt = np.dtype(d) if d != "bfloat16" else None
        if dt is None:
            labels.add("bf16")
        elif dt.kind == "f":
            labels.add(f"fp{dt.itemsize * 8}")
        elif dt.kind in "iub":
            labels.add("int")
        else:
            labels.add("other")
    return labels.pop() if len(labels) == 1 else ("mixed" if labels else "other")


def by_precision(results: Sequence[tuple[str, float]], *, n: int = 2000,
                 seed: int = 0) -> dict[str, dict[str, float]]:
    """Speedups split by precision: per label, ``n``, ``geomean``, ``median``, ``min``, ``max``
    and the bootstrap CI of the median. Results of different precisions are never pooled."""
    groups: dict[str, list[float]] = {}
    for label, value in results:
        groups.setdefault(label, []).append(value)
    out = {}
    for label in sorted(groups):
        values = groups[label]
        summary = summarize(values, n=n, seed=seed)
        out[label] = {**summary, "geomean": geomean(values)}
    return out
