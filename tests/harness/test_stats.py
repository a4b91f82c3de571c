"""Statistics: median, geomean, bootstrap CI, summary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernforge.core import ConfigError
from kernforge.harness import bootstrap_ci, geomean, median, summarize


def test_median_and_geomean():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 0.5, 1.0]) == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        geomean([1.0, 0.0])
    with pytest.raises(ConfigError):
        geomean([1.0, math.inf])
    with pytest.raises(ConfigError):
        median([])


def test_bootstrap_ci_is_seeded_and_brackets_the_median():
    rng = np.random.default_rng(1)
    samples = list(rng.normal(10.0, 1.0, size=50))
    lo, hi = bootstrap_ci(samples)
    assert lo <= median(samples) <= hi
    assert 9.0 < lo < hi < 11.0
    assert bootstrap_ci(samples) == (lo, hi)
    assert bootstrap_ci(samples, seed=2) != (lo, hi)
    narrow = bootstrap_ci(samples, confidence=0.5)
    assert lo <= narrow[0] <= narrow[1] <= hi
    assert bootstrap_ci([4.0]) == (4.0, 4.0)
    with pytest.raises(ConfigError):
        bootstrap_ci(samples, confidence=1.0)


def test_summarize():
    s = summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["max"] == 5.0 and s["n"] == 5
    assert s["min"] <= s["ci_low"] <= s["median"] <= s["ci_high"] <= s["max"]
    with pytest.raises(ConfigError):
        summarize([])


def test_results_are_split_by_precision_never_pooled() -> None:
    from kernforge.harness import by_precision, precision_of

    assert precision_of(["float32"]) == "fp32" and precision_of(["float64", "float64"]) == "fp64"
    assert precision_of(["float16"]) == "fp16" and precision_of(["int32"]) == "int"
    assert precision_of(["float32", "float64"]) == "mixed"
    split = by_precision([("fp32", 2.0), ("fp32", 8.0), ("fp64", 1.5)])
    assert set(split) == {"fp32", "fp64"}
    assert split["fp32"]["geomean"] == pytest.approx(4.0) and split["fp32"]["n"] == 2
    assert split["fp64"]["geomean"] == pytest.approx(1.5)
