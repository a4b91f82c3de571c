"""The CPU flush between timed runs (issue 43 item 7): it evicts what a timed run left warm,
so a second timed run is not faster than a cold one because of the cache, and it costs what
the unit's footprint costs, not a sweep of twice the last-level cache."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends import evict
from kernforge.backends.cpu import CpuBackend, cache_dir, llc_bytes
from kernforge.core import BackendUnavailableError, KernelSource, LaunchConfig, Variant
from kernforge.harness.timing import measure

# a random cyclic chain over the lines of a 256 KiB buffer: every load depends on the last,
# so the hardware prefetchers cannot hide where the lines are (L2 or DRAM)
CHASE = KernelSource(r"""
void chase(const long *restrict next, long *restrict out, long steps) {
    long i = 0;
    for (long s = 0; s < steps; ++s) i = next[i];
    out[0] = i;
}
""", "chase")
LINES = 4096  # 256 KiB of 64-byte lines: fits the L2 of current cores
STRIDE = 8  # longs per line


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CpuBackend:
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "cache"))
    try:
        return CpuBackend()
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))


def _chain() -> np.ndarray:
    order = np.random.default_rng(0).permutation(LINES)
    nxt = np.zeros(LINES * STRIDE, np.int64)
    nxt[order * STRIDE] = np.roll(order, -1) * STRIDE
    return nxt


def test_a_flushed_timed_run_is_as_cold_as_the_first(backend: CpuBackend) -> None:
    compiled = backend.compile(Variant(CHASE))
    args = [_chain(), np.zeros(1, np.int64), np.int64(LINES)]
    launch = LaunchConfig(threads=1)

    def runs(flush: bool) -> list[float]:
        return measure(backend, compiled, args, launch, lambda: None, warmup=2, repeat=15,
                       flush=flush)

    if evict.build(backend._build, cache_dir(), backend._compiler_id) is None:
        pytest.skip("no cache-line flush helper builds on this machine (the sweep is used)")
    warm, cold = runs(False), runs(True)
    # the flush makes every timed run a cold one: the chain's lines come from memory, not
    # from the L2 a previous run filled (on an idle or busy machine: load only slows warm)
    assert statistics.median(cold[1:]) > 2.0 * statistics.median(warm), (cold, warm)
    assert backend._flush is None  # the footprint's lines were flushed, no LLC sweep


def test_the_flush_costs_the_footprint_not_the_last_level_cache(backend: CpuBackend) -> None:
    compiled = backend.compile(Variant(CHASE))
    args = [_chain(), np.zeros(1, np.int64), np.int64(1)]
    backend.launch(compiled, args, LaunchConfig(threads=1))
    touched = [(a.ctypes.data, a.nbytes) for a in (r() for r in backend._touched.values())]
    assert evict.footprint(touched) == LINES * STRIDE * 8 + 8
    costs = []
    for _ in range(7):
        t0 = time.perf_counter()
        backend.flush_cache()
        costs.append(time.perf_counter() - t0)
    if backend._flush is not None:
        pytest.skip("no cache-line flush helper here: the sweep of twice the LLC is used")
    # 256 KiB of lines: well under a millisecond; a sweep of 2 x a 32 MiB L3 is ~10-30 ms
    assert min(costs) < 2e-3, costs


def test_a_buffer_freed_since_the_last_launch_is_not_flushed(backend: CpuBackend) -> None:
    """The flush knows the last launch's buffers weakly: after they are freed (a later
    evaluation's first timed run may come with no warm-up), nothing unmapped is touched."""
    compiled = backend.compile(Variant(CHASE))
    big = np.zeros(llc_bytes() // 8, np.int64)  # within the flush's reach; unmapped when freed
    backend.launch(compiled, [big, np.zeros(1, np.int64), np.int64(0)], LaunchConfig(threads=1))
    assert len(backend._touched) == 2
    key = id(big)
    del big
    backend.flush_cache()  # would fault on the unmapped pages; the dead one is forgotten
    assert key not in backend._touched


def test_the_flush_before_a_side_evicts_that_sides_lines(backend: CpuBackend) -> None:
    """An interleaved comparison alternates two sets of buffers: before a timed run of one side
    the last launch was the other side's, and the restore has just rewritten this side's
    buffers, so the flush must evict this side's lines too, not only the last launch's."""
    compiled = backend.compile(Variant(CHASE))
    real = evict.build(backend._build, cache_dir(), backend._compiler_id)
    if real is None:
        pytest.skip("no cache-line flush helper builds on this machine (the sweep is used)")
    evicted: list[set[int]] = []

    def watched(ranges: evict.Ranges) -> None:
        evicted.append({a for a, _ in ranges})
        real(ranges)

    backend._evict = watched
    sides = [[_chain(), np.zeros(1, np.int64), np.int64(LINES)] for _ in range(2)]
    launch = LaunchConfig(threads=1)
    for i in range(4):  # a b a b, each timed run flushed first
        measure(backend, compiled, sides[i % 2], launch, lambda: None, warmup=0, repeat=1)
    for i, seen in enumerate(evicted[1:], start=1):  # from the second run on, both sides
        own = {a.ctypes.data for a in sides[i % 2][:2]}
        other = {a.ctypes.data for a in sides[(i + 1) % 2][:2]}
        assert own <= seen and other <= seen, (i, seen, own, other)
