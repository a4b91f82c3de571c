"""compute-sanitizer's racecheck on a racy kernel over a large grid (``pytest -m gpu -s
tests/backends/test_sanitize_gpu.py``): the red team's ``shared_race`` on 2^22 elements
(16384 blocks, a hazard in every one) is a finding within seconds, stopped at its first report,
not a timeout; the same kernel without the race is clean. Prints each run's time and report."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.backends import SanitizerRun
from kernforge.backends.sanitize_cuda import find_tool, run_tools
from kernforge.core import KernelSource, LaunchConfig, Variant
from kernforge.testing.redteam_cuda import SAXPY, SHARED_RACE

pytestmark = pytest.mark.gpu
N = 1 << 22


def _runs(code: str, tool: str) -> list[SanitizerRun]:
    pytest.importorskip("cupy")
    if find_tool() is None:
        pytest.skip("compute-sanitizer not found")
    v = Variant(KernelSource(code, "saxpy", "cuda"),
                launch=LaunchConfig(grid=(N // 256,), block=(256,)))
    rng = np.random.default_rng(0)
    x, y = rng.random(N).astype(np.float32), rng.random(N).astype(np.float32)
    runs = run_tools("cuda", v, [y, x, np.float32(2.5), np.int32(N)], tools=(tool,))
    for r in runs:
        print(f"\n{r.tool}: finding={r.finding} timed_out={r.timed_out} "
              f"available={r.available} {r.seconds:.1f} s\n{r.report[:1500]}")
    return runs


def test_racecheck_stops_at_the_first_hazard_of_a_large_racy_grid() -> None:
    (r,) = _runs(SHARED_RACE, "racecheck")
    assert r.available and r.finding and not r.timed_out, r
    assert r.seconds < 60, r.seconds
    assert "hazard" in r.report.lower() or "race" in r.report.lower()


def test_racecheck_is_clean_on_the_same_kernel_without_the_race() -> None:
    (r,) = _runs(SAXPY, "racecheck")
    assert r.available and not r.finding and not r.timed_out, r
