"""A small recorded kernel and faulty candidates of it, for the service's tests, its benchmark
(``benchmarks/bench_service.py``) and docs/service.md: on the CPU backend a three-point smoother
and candidates that dereference NULL, abort, or spin forever; the same on the cuda backend
(an illegal address, a trap, an endless loop)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core import Recording, Variant

CPU_KERNEL = r"""
#ifndef BLK
#define BLK 64
#endif
void smooth(const double *restrict x, double *restrict y, long n) {
    #pragma omp parallel for
    for (long b = 0; b < n; b += BLK)
        for (long i = b; i < b + BLK && i < n; i++)
            y[i] = 0.25 * (i > 0 ? x[i - 1] : 0.0) + 0.5 * x[i]
                 + 0.25 * (i + 1 < n ? x[i + 1] : 0.0);
}
"""
CPU_FAULTS = {
    "segfault": r"""
void smooth(const double *restrict x, double *restrict y, long n) {
    volatile double *p = (double *)0;
    *p = x[0];
    y[0] = (double)n;
}
""",
    "abort": r"""
#include <stdlib.h>
void smooth(const double *restrict x, double *restrict y, long n) {
    if (n > 0) abort();
    y[0] = x[0];
}
""",
    "hang": r"""
void smooth(const double *restrict x, double *restrict y, long n) {
    volatile long k = 0;
    while (1) { k++; }
    y[0] = x[0] + (double)n;
}
""",
    "wrong": r"""
void smooth(const double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++) y[i] = x[i];
}
""",
}
CUDA_KERNEL = r"""
extern "C" __global__ void smooth(const double *x, double *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = 0.25 * (i > 0 ? x[i - 1] : 0.0) + 0.5 * x[i] + 0.25 * (i + 1 < n ? x[i + 1] : 0.0);
}
"""
CUDA_FAULTS = {
    "illegal_address": r"""
extern "C" __global__ void smooth(const double *x, double *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    double *bad = (double *)0x10;
    if (i < n) y[i] = bad[i] + x[i];
}
""",
    "trap": r"""
extern "C" __global__ void smooth(const double *x, double *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i == 0) asm volatile("trap;");
    if (i < n) y[i] = x[i];
}
""",
    "hang": r"""
extern "C" __global__ void smooth(const double *x, double *y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    volatile long k = 0;
    while (n > 0) { k++; }
    if (i < n) y[i] = x[i];
}
""",
}


def record_sample(root: Path, backend: str = "cpu", n: int = 1 << 12) -> Path:
    """Record one launch of the smoother on ``backend`` under ``root``; its unit directory."""
    from ..backends import Kernel
    from ..record import find_recordings, record

    x, y = np.random.default_rng(0).random(n), np.zeros(n)
    if backend == "cuda":
        import cupy as cp
        k = Kernel(CUDA_KERNEL, "smooth", backend="cuda")
        xd, yd = cp.asarray(x), cp.asarray(y)
        with record(root):
            k(xd, yd, n, grid=(n + 127) // 128, block=128)
    else:
        k = Kernel(CPU_KERNEL, "smooth", backend=backend)
        with record(root):
            k(x, y, n)
    return Path(find_recordings(root)[-1])


def fault(recording: Recording, name: str) -> Variant:
    """The recorded variant with the source of the faulty candidate ``name``."""
    faults = CUDA_FAULTS if recording.backend == "cuda" else CPU_FAULTS
    return recording.variant.with_(source=recording.source.with_code(faults[name]))


def good_variants(recording: Recording, count: int) -> list[Variant]:
    """``count`` correct variants (cycling through options, block sizes, thread counts)."""
    if recording.backend == "cuda":
        blocks = [32, 64, 128, 256]
        return [recording.variant.with_(launch=recording.launch.reblocked(blocks[i % 4]))
                for i in range(count)]
    opts = [{"opt_level": o, "unroll": u} for o in ("O2", "O3") for u in (False, True)]
    return [recording.variant.with_(options=opts[i % 4], defines={"BLK": 32 << (i % 3)})
            for i in range(count)]
