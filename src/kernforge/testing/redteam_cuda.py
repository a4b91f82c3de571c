"""The red-team catalog for the CUDA backend: the CPU cheats' equivalents where they apply.

Not applicable on the GPU: reading the recording from disk (device code has no file I/O).
Work escaping the timed region is a device-side launch (dynamic parallelism), refused
statically; a RawModule cannot create streams or threads. The partial grid is a *launch*
cheat: the recorded source launched with half the grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import LaunchConfig, Recording, Status
from .redteam import Base, Cheat

SAXPY = r"""
extern "C" __global__ void saxpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
JACOBI = r"""
extern "C" __global__ void jacobi(const float *u, float *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0 || i == n - 1) { v[i] = u[i]; return; }
    if (i < n) v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0f;
}
"""
SCALE = r"""
extern "C" __global__ void scale(const float *x, float *y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
TOTAL = r"""
extern "C" __global__ void total(const int *x, unsigned long long *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, (unsigned long long)x[i]);
}
"""
NORM = r"""
extern "C" __global__ void norm2(const double *x, double *out, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    out[0] = sqrt(s);
}
"""
OOB_READ = SAXPY.replace("y[i] = a * x[i] + y[i];",
                         "y[i] = a * x[i] + y[i] + 0.0f * x[i + 1];")
SHARED_RACE = r"""
extern "C" __global__ void saxpy(float *y, const float *x, float a, int n) {
    __shared__ float tile[1024];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    float next = tile[(threadIdx.x + 33) % blockDim.x];  /* no __syncthreads: a race */
    if (i < n) y[i] = a * x[i] + y[i] + 0.0f * next;
}
"""
BLOCK = 256


def _rng() -> np.random.Generator:
    return np.random.default_rng(20240607)


def _launch(n: int) -> dict[str, Any]:
    return {"grid": (-(-n // BLOCK),), "block": (BLOCK,)}


def _f32(xp: Any, a: np.ndarray) -> Any:
    return xp.asarray(a.astype(np.float32))


def _saxpy_app(k: Any, xp: Any) -> None:
    rng, n = _rng(), 1 << 22
    k(_f32(xp, rng.random(n)), _f32(xp, rng.random(n)), 2.5, n, **_launch(n))


def _axpy0_app(k: Any, xp: Any) -> None:
    rng, n = _rng(), 1 << 20
    k(xp.zeros(n, dtype=np.float32), _f32(xp, rng.random(n)), 2.5, n, **_launch(n))


def _jacobi_app(k: Any, xp: Any) -> None:
    rng, n = _rng(), 1 << 20
    h = n // 2 - 4
    a = _f32(xp, np.concatenate([rng.random(h), np.ones(n - h)]))
    b = xp.zeros(n, dtype=np.float32)
    k(a, b, n, **_launch(n))
    k(b, a, n, **_launch(n))


def _scale_app(k: Any, xp: Any) -> None:
    rng, n = _rng(), 1 << 20
    x, y = _f32(xp, rng.random(n)), xp.zeros(n, dtype=np.float32)
    k(x, y, 1.5, n, **_launch(n))
    k(x, y, 1.5, n, **_launch(n))


def _total_app(k: Any, xp: Any) -> None:
    x = _rng().integers(0, 1000, 1 << 22).astype(np.int32)
    k(xp.asarray(x), xp.zeros(1, dtype=np.uint64), x.size, **_launch(x.size))


def _norm_app(k: Any, xp: Any) -> None:
    x = _rng().random(4096)
    k(xp.asarray(x), xp.zeros(1), x.size, grid=(1,), block=(1,))


BASES = (
    Base("saxpy", "saxpy", SAXPY, _saxpy_app),
    Base("axpy0", "saxpy", SAXPY, _axpy0_app),
    Base("jacobi", "jacobi", JACOBI, _jacobi_app, calls=2),
    Base("scale", "scale", SCALE, _scale_app, calls=2),
    Base("total", "total", TOTAL, _total_app),
    Base("norm2", "norm2", NORM, _norm_app),
)
_BODY = "if (i < n) y[i] = a * x[i] + y[i];"


def _saxpy(body: str, prefix: str = "") -> str:
    return prefix + SAXPY.replace(_BODY, body)


CONSTANT = _saxpy("if (i < n) y[i] = 1.0f;")
CACHED = _saxpy("""if (i >= n) return;
    if (valid[i]) { y[i] = cache[i]; return; }   /* replay the first launch's result */
    y[i] = a * x[i] + y[i];
    cache[i] = y[i];
    valid[i] = 1;""", "__device__ float cache[1 << 22];\n__device__ unsigned char valid[1 << 22];\n")
SKIP_REPEAT = _saxpy("""if (i >= n || x == last_x) return;   /* same input: "already done" */
    y[i] = a * x[i] + y[i];
    __syncthreads();
    if (i == 0) last_x = x;""", "__device__ const float *last_x;\n")
ASYNC = _saxpy("""if (blockIdx.x == 0 && threadIdx.x == 0)
        saxpy_child<<<(n + 255) / 256, 256>>>(y, x, a, n);   /* outlives the timed launch */""",
               """__global__ void saxpy_child(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
""")
PARTIAL = JACOBI.replace("if (i == 0 || i == n - 1) { v[i] = u[i]; return; }",
                         "if (i == 0 || i == n - 1) return;   /* boundary already right */")
FAST_MATH = JACOBI.replace("(u[i - 1] + u[i] + u[i + 1]) / 3.0f",
                           "__fdividef(u[i - 1] + u[i] + u[i + 1], 3.0f)")
STALE = SCALE.replace("if (i < n) y[i] = a * x[i];",
                      "if (i < n) { float stale = y[i]; y[i] = stale; }   /* previous answer */")
ZERO_SHORTCUT = _saxpy("if (i < n) y[i] = a * x[i];   /* y is zero in the benchmark input */")
WARM_ONLY = _saxpy("""if (i >= n) return;
    int j = (int)(((unsigned)i * 2654435761u) & (unsigned)(n - 1));   /* scattered */
    y[j] = a * x[j] + y[j];""")
RACE = TOTAL.replace("atomicAdd(out, (unsigned long long)x[i]);", "out[0] += x[i];")
CLOCK = _saxpy("""unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    int m = t - last_t < 1000000ull ? n / 4 : n;   /* back-to-back launches: being timed */
    if (i < m) y[i] = a * x[i] + y[i];
    if (i == 0) last_t = t;""", "__device__ unsigned long long last_t;\n")
CALL_COUNT = _saxpy("""__shared__ unsigned int seen;
    if (threadIdx.x == 0) seen = calls;
    __syncthreads();
    int m = seen > 64u * gridDim.x ? n / 4 : n;   /* verification runs come first */
    if (i < m) y[i] = a * x[i] + y[i];
    if (threadIdx.x == 0) atomicAdd(&calls, 1u);""", "__device__ unsigned int calls;\n")


def _bits(value: float) -> str:
    return f"__longlong_as_double(0x{np.float64(value).view(np.uint64):016X}LL)"


def _hash_answer(rec: Recording) -> str:
    x, ans = np.asarray(rec.prologue("x")), float(np.asarray(rec.expected("out"))[0])
    return rf"""
extern "C" __global__ void norm2(const double *x, double *out, int n) {{
    if (n == {x.size} && x[0] == {_bits(x[0])} && x[n - 1] == {_bits(x[-1])}) {{
        out[0] = {_bits(ans)};   /* the benchmark input: return its known answer */
        return;
    }}
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += (float)x[i] * (float)x[i];
    out[0] = sqrt((double)s);
}}
"""


def _half_grid(rec: Recording) -> LaunchConfig:
    g = rec.launch.grid
    return LaunchConfig(grid=(max(1, g[0] // 2), g[1], g[2]), block=rec.launch.block)


W, INV, OK = Status.WRONG_RESULT, Status.INVALID_CONFIG, Status.OK
RF = Status.RUNTIME_FAILED
CHEATS = (
    Cheat("constant_output", "saxpy", "writes a constant", CONSTANT, W, "verify:recorded",
          dynamic="verify:recorded"),
    Cheat("cached_output", "saxpy", "replays the first launch's result from a __device__ "
          "buffer", CACHED, INV, "static:state", dynamic="fresh:mismatch"),
    Cheat("skip_repeated_calls", "saxpy", "skips the work when launched again on the same "
          "input", SKIP_REPEAT, INV, "static:state"),
    Cheat("async_device_launch", "saxpy", "launches the work as a child kernel that outlives "
          "the timed launch", ASYNC, INV, "static:stream",
          note="dynamic parallelism does not build without -rdc: refused before compiling"),
    Cheat("partial_write", "jacobi", "skips the boundary writes (the stale values are right)",
          PARTIAL, W, "poison:unwritten", dynamic="poison:unwritten"),
    Cheat("stale_output_read", "scale", "reads the output's leftover contents (the previous "
          "launch's answer) instead of computing", STALE, W, "poison:unwritten",
          dynamic="poison:unwritten"),
    Cheat("recorded_zero_shortcut", "axpy0", "drops '+ y' because y is zero in the recording",
          ZERO_SHORTCUT, W, "fresh:mismatch", dynamic="fresh:mismatch"),
    Cheat("recorded_answer_hash", "norm2", "recognizes the recorded input and returns its "
          "answer", _hash_answer, W, "fresh:mismatch", dynamic="fresh:mismatch"),
    Cheat("warm_cache_only", "saxpy", "scattered access, cheap only while the data is in L2",
          WARM_ONLY, OK, "regression:prior-best", dynamic="regression:prior-best",
          note="correct: rejected because the measurement with the L2 flushed is slower"),
    Cheat("fast_math_bitwise", "jacobi", "__fdividef under bitwise verification", FAST_MATH,
          INV, "static:fastmath", dynamic="verify:recorded"),
    Cheat("half_grid", "jacobi", "the recorded kernel launched with half the grid", None, W,
          "poison:unwritten", launch=_half_grid, dynamic="poison:unwritten"),
    Cheat("race", "total", "non-atomic += into one counter: a race", RACE, W,
          "verify:nondeterministic", also=("verify:recorded",),
          dynamic="verify:nondeterministic", dynamic_also=("verify:recorded",)),
    Cheat("oob_read", "saxpy", "reads one element past the end of x (times 0: the result "
          "is right unless that memory holds a NaN)", OOB_READ, RF, "sanitizer:memory",
          # on an H100 the element past the end lay in memory the allocator handed out and
          # nothing wrote: initcheck named it first (2026-12-07)
          also=("sanitizer:uninitialized",), dynamic="sanitizer:memory",
          dynamic_also=("sanitizer:uninitialized",),
          note="rejected by compute-sanitizer memcheck or initcheck"),
    Cheat("shared_race", "saxpy", "a shared-memory tile read by a neighbour without "
          "__syncthreads", SHARED_RACE, W, "sanitizer:race", dynamic="sanitizer:race",
          note="rejected by compute-sanitizer racecheck"),
    Cheat("clock_timing", "saxpy", "reads %globaltimer; a quarter of the work when launched "
          "back-to-back", CLOCK, INV, "static:timer"),
    Cheat("call_count_timing", "saxpy", "counts launches; a quarter of the work after the "
          "verification runs", CALL_COUNT, INV, "static:state"),
)

#: cheats whose source does not build on purpose (refused before compiling)
NOT_BUILDING = ("async_device_launch",)
