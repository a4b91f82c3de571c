"""The cpu sanitizer gate: a race and an out-of-bounds read are findings on every run; honest
OpenMP code (reductions, barriers, critical sections, atomics) is clean, so the gate rejects
races, not OpenMP."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge import Kernel
from kernforge.core import Recording, Status
from kernforge.record import find_recordings, load_recording, record
from kernforge.replay.checks import Integrity
from kernforge.replay.validate import validate

HONEST = r"""
void stats(const double *x, double *out, double *y, long n) {
    double s = 0.0, m = 0.0;
    #pragma omp parallel for reduction(+:s)
    for (long i = 0; i < n; i++) s += x[i];
    #pragma omp parallel
    {
        #pragma omp for
        for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
        #pragma omp for
        for (long i = 1; i < n; i++) y[i] += x[i - 1];
        #pragma omp critical
        { if (x[0] > m) m = x[0]; }
        #pragma omp atomic
        s += 0.0;
    }
    out[0] = s + m;
}
"""
RACY = HONEST.replace("        #pragma omp for\n        for (long i = 1;",
                      "        #pragma omp for nowait\n        for (long i = 1;") \
    .replace("for (long i = 1; i < n; i++) y[i] += x[i - 1];",
             "for (long i = 1; i < n; i++) y[i] += y[i - 1] * 0.0 + x[i - 1];")
OOB = HONEST.replace("out[0] = s + m;", "out[0] = s + m + 0.0 * x[n];")


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    where = tmp_path_factory.mktemp("sanitize") / "rec"
    k = Kernel(HONEST, "stats", backend="cpu")
    n = 1 << 14
    x, out, y = np.linspace(0.0, 1.0, n), np.zeros(1), np.zeros(n)
    with record(where, kernels="stats"):
        k(x, out, y, np.int64(n))
    return load_recording(find_recordings(where)[0])


def _gate(rec: Recording, code: str):
    v = rec.variant.with_(source=rec.source.with_code(code))
    return validate(rec, v, integrity=Integrity(static=False, poison=False, fresh_trials=0,
                                                verify_runs=1, roofline=False), passes=1)


def test_honest_openmp_is_clean(rec: Recording) -> None:
    v = _gate(rec, HONEST)
    assert v.reason != "sanitizer:race", v.message
    assert "tsan: clean" in v.notes["sanitize"] and "asan: clean" in v.notes["sanitize"]


def test_a_read_past_the_end_is_an_asan_finding(rec: Recording) -> None:
    v = _gate(rec, OOB)
    assert (v.verdict, v.status, v.reason) == ("rejected", Status.RUNTIME_FAILED,
                                                "sanitizer:memory"), v.message
    assert "AddressSanitizer" in v.message and "heap-buffer-overflow" in v.message


@pytest.mark.slow  # a ThreadSanitizer build; ASan is the quick finding
def test_a_race_across_a_missing_barrier_is_a_tsan_finding(rec: Recording) -> None:
    v = _gate(rec, RACY)
    assert (v.verdict, v.status, v.reason) == ("rejected", Status.WRONG_RESULT,
                                                "sanitizer:race"), v.message
    assert "ThreadSanitizer: data race" in v.message
