"""Statistics every reported number goes through: median, geomean, bootstrap CI."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..core import ConfigError


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
