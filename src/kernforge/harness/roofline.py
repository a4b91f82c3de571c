"""The roofline refusal: no kernel moves its data faster than the device copies memory.

``must_move``: a lower bound on the bytes a correct kernel moves, from what the launch
touches. Every output element the recorded launch changed must be written (its bytes count
once: the recorded written ranges). Reads count where they are known: an array the signature
declares read-only (``const``) is counted as read in full; an array the kernel may write but
left unchanged (an output that already held its values, e.g. the faces a boundary kernel
re-imposes) counts nothing, since a correct kernel need not read or write it at all. Counting
a read-only input in full is an assumption (a kernel may read a sub-range given by a scalar),
so the bound is *calibrated* by the recorded kernel timed in the same interleaved run as the
candidate: the bound is never above the recorded kernel's own time there, and a candidate is
refused only when it is more than ``1 / slack`` times faster than that.

Copy bandwidth is measured with the same backend, in the same process, with the same protocol
(cache flushed before each timed run): a copy kernel in the backend's language (C + OpenMP on
every core for ``cpu``, a grid-stride CUDA kernel for ``cuda``), over at least 64 MiB, best of
5; a copy moves ``2 * nbytes``. A candidate is refused when its median time is below
``slack * must_move / bandwidth`` (slack 0.5 by default: write-allocate traffic, which copies
pay and the count does not, and read-only streams can beat a copy by up to ~1.5x).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import Backend
from ..core import KernelSource, LaunchConfig, Variant
from .timing import measure

MIN_COPY_BYTES = 64 << 20
MAX_COPY_BYTES = 1 << 30
DEFAULT_SLACK = 0.5

COPY_SOURCES = {
    "c": """
void kf_copy(double *restrict dst, const double *restrict src, long n) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) dst[i] = src[i];
}
""",
    "cuda": """
extern "C" __global__ void kf_copy(double *dst, const double *src, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}
""",
    "python": '''
def kf_copy(dst: "double *", src: "const double *", n: "long") -> None:
    dst[:n] = src[:n]
''',
}
_cache: dict[tuple[str, int], Bandwidth] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Bandwidth:
    """A measured copy: ``bytes_per_s`` counts the bytes read plus the bytes written."""

    bytes_per_s: float
    nbytes: int
    seconds: float
    method: str

    def to_json(self) -> dict[str, Any]:
        return {"bytes_per_s": self.bytes_per_s, "nbytes": self.nbytes,
                "seconds": self.seconds, "method": self.method}


def _copy_launch(backend: Backend, n: int) -> LaunchConfig:
    if backend.language == "cuda":
        return LaunchConfig(grid=(min(-(-n // 256), 1 << 20), 1, 1), block=(256, 1, 1))
    return LaunchConfig()


def copy_bandwidth(backend: Backend, nbytes: int = 0, *, repeat: int = 5) -> Bandwidth | None:
    """The backend's copy bandwidth over ``max(nbytes, 64 MiB)`` bytes (cached per process and
    size); None when the backend's language has no copy kernel."""
    code = COPY_SOURCES.get(backend.language)
    if code is None:
        return None
    size = min(MAX_COPY_BYTES, max(MIN_COPY_BYTES, int(nbytes)))
    size -= size % 8
    key = (backend.name, size)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    variant = Variant(KernelSource(code, "kf_copy", backend.language))
    compiled = backend.compile(variant)
    n = size // 8
    src = backend.to_device(np.arange(n, dtype=np.float64))
    dst = backend.to_device(np.zeros(n, dtype=np.float64))
    args = [dst, src, n]
    samples = measure(backend, compiled, args, _copy_launch(backend, n), lambda: None,
                      warmup=1, repeat=repeat, flush=True)
    best = min(samples)
    bw = Bandwidth(2 * size / best if best > 0 else float("inf"), size, best,
                   f"{backend.name} copy kernel kf_copy, best of {repeat}, cache flushed")
    del src, dst
    with _lock:
        _cache[key] = bw
    return bw


def must_move_bytes(arrays: list[tuple[np.ndarray, np.ndarray, bool]] |
                    list[tuple[np.ndarray, np.ndarray, bool, bool]]) -> int:
    """Bytes a correct kernel must move: ``(prologue, expected, written[, read_only])`` per
    array; an unwritten array counts in full only when read-only (the default when not
    said: the recording did not know)."""
    total = 0
    for entry in arrays:
        prologue, expected, written = entry[0], entry[1], entry[2]
        read_only = bool(entry[3]) if len(entry) > 3 else True
        if written:
            a, b = np.ascontiguousarray(prologue), np.ascontiguousarray(expected)
            size = a.dtype.itemsize
            raw_a = a.reshape(-1).view(np.uint8).reshape(a.size, size)
            raw_b = b.reshape(-1).view(np.uint8).reshape(b.size, size)
            total += int((raw_a != raw_b).any(axis=1).sum()) * size
        elif read_only:
            total += int(np.asarray(prologue).nbytes)
    return total


@dataclass(frozen=True)
class RooflineCheck:
    """The gate's verdict: ``refused``, ``ok`` or ``not-applicable`` (with a note)."""

    verdict: str
    must_move: int
    bound_s: float
    candidate_s: float
    original_s: float | None
    slack: float
    bandwidth: Bandwidth | None
    note: str = ""

    @property
    def refused(self) -> bool:
        return self.verdict == "refused"

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "must_move_bytes": self.must_move,
                "bound_s": self.bound_s, "candidate_s": self.candidate_s,
                "original_s": self.original_s, "slack": self.slack,
                "bandwidth": self.bandwidth.to_json() if self.bandwidth else None,
                "note": self.note}


def roofline_check(must_move: int, bandwidth: Bandwidth | None, candidate_s: float,
                   original_s: float | None, *, slack: float = DEFAULT_SLACK) -> RooflineCheck:
    """Refuse ``candidate_s`` below ``slack * bound``, the bound ``must_move / bandwidth``
    calibrated down to the recorded kernel's time ``original_s`` when that is below it (the
    recorded kernel moves less than counted: it reads part of an input). ``original_s`` must
    come from the same interleaved run as ``candidate_s``."""
    if bandwidth is None or must_move <= 0:
        why = "no copy kernel for this backend" if bandwidth is None else "nothing must move"
        return RooflineCheck("not-applicable", must_move, 0.0, candidate_s, original_s, slack,
                             bandwidth, why)
    bound = must_move / bandwidth.bytes_per_s
    calibrated = original_s is not None and 0 < original_s < bound
    if calibrated:
        assert original_s is not None
        bound = original_s
    limit = slack * bound
    verdict = "refused" if candidate_s < limit else "ok"
    what = (f"the recorded kernel's {original_s:.3g} s in the same run, below the "
            f"copy bound of {must_move} bytes at {bandwidth.bytes_per_s / 1e9:.1f} GB/s"
            if calibrated else
            f"{must_move} bytes at {bandwidth.bytes_per_s / 1e9:.1f} GB/s")
    note = (f"{candidate_s:.3g} s is below {slack:g} x {bound:.3g} s ({what})"
            if verdict == "refused" else
            (f"bound calibrated by the recorded kernel ({original_s:.3g} s)" if calibrated
             else ""))
    return RooflineCheck(verdict, must_move, bound, candidate_s, original_s, slack, bandwidth,
                         note)
