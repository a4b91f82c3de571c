"""The red-team catalog for the CPU backend: real C + OpenMP kernels and their cheats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..backends.cpu import default_threads
from ..core import Recording, Status
from .redteam import Base, Cheat

SAXPY = r"""
void saxpy(double *y, const double *x, double a, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
"""
JACOBI = r"""
void jacobi(const double *u, double *v, long n) {
    v[0] = u[0];
    v[n - 1] = u[n - 1];
    #pragma omp parallel for
    for (long i = 1; i < n - 1; i++) v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0;
}
"""
SCALE = r"""
void scale(const double *x, double *y, double a, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = a * x[i];
}
"""
TOTAL = r"""
void total(const int *x, long long *out, long n) {
    long long s = 0;
    #pragma omp parallel for reduction(+:s)
    for (long i = 0; i < n; i++) s += x[i];
    out[0] = s;
}
"""
NORM = r"""
#include <math.h>
void norm2(const double *x, double *out, long n) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += x[i] * x[i];
    out[0] = sqrt(s);
}
"""


def _rng() -> np.random.Generator:
    return np.random.default_rng(20240607)


def _saxpy_app(k: Any, xp: Any) -> None:
    """One thread: its timing is stable even on a small, shared machine (CI)."""
    rng, n = _rng(), 1 << 17
    k(xp.asarray(rng.random(n)), xp.asarray(rng.random(n)), 2.5, n, threads=1)


def _axpy0_app(k: Any, xp: Any) -> None:  # y starts at zero in the recorded run
    rng, n = _rng(), 1 << 16
    k(xp.zeros(n), xp.asarray(rng.random(n)), 2.5, n)


def _jacobi_app(k: Any, xp: Any) -> None:
    """Two sweeps; the second is recorded. The right part of the domain has converged (all
    ones) and the boundary values are fixed, so the output's prologue already holds the
    answer there."""
    rng, n = _rng(), 1 << 16
    h = n // 2 - 4
    a = xp.asarray(np.concatenate([rng.random(h), np.ones(n - h)]))
    b = xp.zeros(n)
    k(a, b, n)
    k(b, a, n)


def _scale_app(k: Any, xp: Any) -> None:
    """The same call twice; the second is recorded: its output already holds the answer."""
    rng, n = _rng(), 1 << 16
    x, y = xp.asarray(rng.random(n)), xp.zeros(n)
    k(x, y, 1.5, n)
    k(x, y, 1.5, n)


def _total_app(k: Any, xp: Any) -> None:
    """Two threads at least, and long enough that they overlap even when time-sliced."""
    x = _rng().integers(0, 1000, 1 << 23).astype(np.int32)
    k(xp.asarray(x), xp.zeros(1, dtype=np.int64), x.size, threads=max(2, default_threads()))


def _norm_app(k: Any, xp: Any) -> None:
    x = _rng().random(4096)
    k(xp.asarray(x), xp.zeros(1), x.size)


BASES = (
    Base("saxpy", "saxpy", SAXPY, _saxpy_app),
    Base("axpy0", "saxpy", SAXPY, _axpy0_app),
    Base("jacobi", "jacobi", JACOBI, _jacobi_app, calls=2),
    Base("scale", "scale", SCALE, _scale_app, calls=2),
    Base("total", "total", TOTAL, _total_app),
    Base("norm2", "norm2", NORM, _norm_app),
)


def _loop(body: str) -> str:
    return SAXPY.replace("y[i] = a * x[i] + y[i];", body)


CONSTANT = _loop("y[i] = 1.0;")
CACHED = r"""
#include <stdlib.h>
#include <string.h>
static double *cache;   /* the first call's result, replayed on every later call */
static long cached_n;
void saxpy(double *y, const double *x, double a, long n) {
    if (cache && cached_n == n) { memcpy(y, cache, n * sizeof(double)); return; }
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
    cache = malloc(n * sizeof(double));
    memcpy(cache, y, n * sizeof(double));
    cached_n = n;
}
"""
SKIP_REPEAT = r"""
static const double *last_x;   /* same input as last time? then the work is "already done" */
static double last_x0;
void saxpy(double *y, const double *x, double a, long n) {
    if (x == last_x && x[0] == last_x0) return;
    last_x = x;
    last_x0 = x[0];
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
"""
ASYNC = r"""
#include <pthread.h>
#include <stdlib.h>
struct job { double *y; const double *x; double a; long n; };
static void *work(void *p) {
    struct job *j = p;
    for (long i = 0; i < j->n; i++) j->y[i] = j->a * j->x[i] + j->y[i];
    free(j);
    return NULL;
}
void saxpy(double *y, const double *x, double a, long n) {
    struct job *j = malloc(sizeof *j);   /* the work runs after the call has returned */
    j->y = y; j->x = x; j->a = a; j->n = n;
    pthread_t t;
    pthread_create(&t, NULL, work, j);
    pthread_detach(t);
}
"""
PARTIAL = JACOBI.replace("    v[0] = u[0];\n    v[n - 1] = u[n - 1];\n",
                         "    /* the boundary already holds the right values */\n")
HALF_GRID = JACOBI.replace("for (long i = 1; i < n - 1; i++)", "for (long i = 1; i < n / 2; i++)")
FAST_MATH = '#pragma GCC optimize("fast-math")\n' + JACOBI
STALE = r"""
void scale(const double *x, double *y, double a, long n) {
    /* y still holds a * x from the previous call: read it back instead of computing */
    #pragma omp parallel for
    for (long i = 0; i < n; i++) { volatile double stale = y[i]; y[i] = stale; }
    (void)x; (void)a;
}
"""
ZERO_SHORTCUT = _loop("y[i] = a * x[i];  /* y is zero in the benchmark input */")
WARM_ONLY = _loop("""{  /* scattered order: cheap only while the data is cached */
        long j = (long)(((unsigned long)i * 2654435761UL) & (unsigned long)(n - 1));
        y[j] = a * x[j] + y[j];
    }""")
RACE = TOTAL.replace(" reduction(+:s)", "")
CLOCK = r"""
#include <time.h>
static double last;
void saxpy(double *y, const double *x, double a, long n) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = ts.tv_sec + 1e-9 * ts.tv_nsec;
    long m = now - last < 0.05 ? n / 4 : n;   /* called back-to-back: being timed */
    last = now;
    #pragma omp parallel for
    for (long i = 0; i < m; i++) y[i] = a * x[i] + y[i];
}
"""
CALL_COUNT = r"""
static long calls;
void saxpy(double *y, const double *x, double a, long n) {
    long m = ++calls > 16 ? n / 4 : n;   /* verification runs come first, timed runs later */
    #pragma omp parallel for
    for (long i = 0; i < m; i++) y[i] = a * x[i] + y[i];
}
"""


def _hash_answer(rec: Recording) -> str:
    x, ans = np.asarray(rec.prologue("x")), float(np.asarray(rec.expected("out"))[0])
    return rf"""
#include <math.h>
void norm2(const double *x, double *out, long n) {{
    if (n == {x.size} && x[0] == {float(x[0]).hex()} && x[n - 1] == {float(x[-1]).hex()}) {{
        out[0] = {ans.hex()};   /* the benchmark input: return its known answer */
        return;
    }}
    float s = 0.0f;
    for (long i = 0; i < n; i++) s += (float)x[i] * (float)x[i];
    out[0] = sqrt((double)s);
}}
"""


def _read_epilogue(rec: Recording) -> str:
    blob = Path(rec.path).resolve() / "blobs" / f"{rec.arg('y').epilogue}.npy"
    return rf"""
#include <stdio.h>
void saxpy(double *y, const double *x, double a, long n) {{
    FILE *f = fopen("{blob}", "rb");   /* the recorded epilogue, on disk */
    if (!f) return;
    fseek(f, -(long)(n * sizeof(double)), SEEK_END);
    if (fread(y, sizeof(double), (size_t)n, f) != (size_t)n) y[0] = 0.0;
    fclose(f);
    (void)x; (void)a;
}}
"""


W, INV, OK = Status.WRONG_RESULT, Status.INVALID_CONFIG, Status.OK
CHEATS = (
    Cheat("constant_output", "saxpy", "writes a constant", CONSTANT, W, "verify:recorded",
          dynamic="verify:recorded"),
    Cheat("cached_output", "saxpy", "replays the first call's result from a static buffer",
          CACHED, INV, "static:state", dynamic="fresh:mismatch"),
    Cheat("skip_repeated_calls", "saxpy", "skips the work when called again on the same input",
          SKIP_REPEAT, INV, "static:state", dynamic="verify:nondeterministic"),
    Cheat("async_thread", "saxpy", "does the work in a detached thread after returning",
          ASYNC, INV, "static:thread", note="with static checks off it is not run in the "
          "test process (a detached thread may write freed memory); kernforge integrity redteam "
          "--dynamic runs it in a child process, where the outcome depends on timing"),
    Cheat("partial_write", "jacobi", "skips the boundary writes (the stale values are right)",
          PARTIAL, W, "poison:unwritten", dynamic="poison:unwritten"),
    Cheat("stale_output_read", "scale", "reads the output's leftover contents (the previous "
          "call's answer) instead of computing", STALE, W, "poison:unwritten",
          dynamic="poison:unwritten"),
    Cheat("recorded_zero_shortcut", "axpy0", "drops '+ y' because y is zero in the recording",
          ZERO_SHORTCUT, W, "fresh:mismatch", dynamic="fresh:mismatch"),
    Cheat("recorded_answer_hash", "norm2", "recognizes the recorded input and returns its "
          "answer", _hash_answer, W, "fresh:mismatch", dynamic="fresh:mismatch"),
    Cheat("warm_cache_only", "saxpy", "scattered access, cheap only while the data is cached",
          WARM_ONLY, OK, "regression:prior-best", dynamic="regression:prior-best",
          note="correct: rejected because the flushed (cold) measurement is slower"),
    Cheat("fast_math_bitwise", "jacobi", "#pragma GCC optimize(\"fast-math\") under bitwise "
          "verification", FAST_MATH, INV, "static:fastmath", dynamic="verify:recorded"),
    Cheat("half_grid", "jacobi", "loop bound n/2: covers only part of the grid", HALF_GRID, W,
          "poison:unwritten", dynamic="poison:unwritten"),
    Cheat("omp_race", "total", "OpenMP sum without reduction(+:s): a race", RACE, W,
          "sanitizer:race", dynamic="sanitizer:race",
          note="rejected by the ThreadSanitizer gate on every run, whatever the threads' "
               "interleaving (repeated verification alone catches it only when it loses)"),
    Cheat("clock_timing", "saxpy", "reads the clock; does a quarter of the work when called "
          "back-to-back", CLOCK, INV, "static:timer", dynamic="verify:nondeterministic"),
    Cheat("call_count_timing", "saxpy", "counts calls; a quarter of the work after the "
          "verification runs", CALL_COUNT, INV, "static:state", dynamic="verify:after-timing"),
    Cheat("read_recorded_epilogue", "saxpy", "reads the expected output from the recording "
          "on disk", _read_epilogue, INV, "static:io", dynamic="fresh:mismatch"),
)
