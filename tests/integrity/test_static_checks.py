"""Static checks on candidate source: rules, line numbers, what never triggers, excuses."""

from __future__ import annotations

import pytest

from kernforge.core import KernelSource
from kernforge.harness.static_checks import (
    check_defines,
    check_options,
    check_source,
    new_findings,
)


def rules(code: str, language: str = "c", **kw: bool) -> set[tuple[str, str]]:
    return {(f.reason, f.symbol) for f in check_source(code, language, **kw)}


@pytest.mark.parametrize(("snippet", "reason", "symbol"), [
    ("pthread_t t; pthread_create(&t, 0, f, 0);", "static:thread", "pthread_create"),
    ("if (fork() == 0) {}", "static:thread", "fork"),
    ("struct timespec t; clock_gettime(1, &t);", "static:timer", "clock_gettime"),
    ("double t = omp_get_wtime();", "static:timer", "omp_get_wtime"),
    ("long t = clock();", "static:timer", "clock"),
    ("usleep(10);", "static:timer", "usleep"),
    ("unsigned long long t; __asm__ volatile(\"rdtsc\" : \"=A\"(t));", "static:timer", "rdtsc"),
    ("FILE *f = fopen(\"x\", \"r\");", "static:io", "fopen"),
    ("printf(\"%d\", 1);", "static:io", "printf"),
    ("char *e = getenv(\"HOME\");", "static:io", "getenv"),
    ("static int calls = 0; calls++;", "static:state", "calls"),
    ("static double *keep; keep = y;", "static:state", "keep"),
])
def test_each_c_rule_fires_on_its_construct(snippet: str, reason: str, symbol: str) -> None:
    code = f"#include <stdio.h>\nvoid k(double *y, long n) {{\n    {snippet}\n}}\n"
    found = check_source(code, "c")
    assert (reason, symbol) in {(f.reason, f.symbol) for f in found}
    assert all(f.line == 3 for f in found if f.symbol == symbol)  # names the line


def test_fastmath_only_matters_in_bitwise_mode() -> None:
    code = '#pragma GCC optimize("fast-math")\nvoid k(double *y) { y[0] = 1.0; }\n'
    assert ("static:fastmath", '#pragma GCC optimize("fast-math")') in rules(code)
    assert rules(code, bitwise=False) == set()
    attr = '__attribute__((optimize("Ofast"))) void k(double *y) { y[0] = 1.0; }'
    assert {r for r, _ in rules(attr)} == {"static:fastmath"}


def test_legitimate_kernels_have_no_findings() -> None:
    code = r"""
#include <math.h>
#define N 16
typedef double real;
static inline double sq(double v) { return v * v; }
static const double W[3] = {0.25, 0.5, 0.25};
struct pair { double a, b; };
void k(const real *x, real *y, long n) {
    double time = 0.0; int clock = 3;          /* ambiguous names, not called */
    double scratch[N];
    const char *s = "printf clock_gettime";    /* strings and comments: clock_gettime() */
    #pragma omp parallel for schedule(static) nowait
    for (long i = 1; i < n - 1; i++)
        y[i] = W[0] * x[i - 1] + W[1] * sq(x[i]) + W[2] * x[i + 1] + time + clock;
    (void)s; (void)scratch;
}
"""
    assert check_source(code, "c") == []


def test_macros_and_pragmas_are_scanned() -> None:
    code = "#define NOW() clock_gettime(1, &ts)\nvoid k(double *y) { y[0] = 0; }\n"
    assert ("static:timer", "clock_gettime") in rules(code)
    code = "void k(double *y) {\n#pragma omp target nowait\n y[0] = 0; }\n"
    assert ("static:thread", "#pragma omp") in rules(code)


def test_cuda_rules() -> None:
    code = r"""
__device__ int counter;
__constant__ float coeff[4];
extern __shared__ float dyn[];
float host_helper(float v) { return v; }
extern "C" __global__ void k(float *y, const float *x, int n) {
    __shared__ float tile[32];
    unsigned long long t = clock64();
    y[0] = __expf(x[0]) + host_helper(x[1]) + coeff[0] + tile[0] + dyn[0];
    child<<<1, 1>>>(y);
    std::thread th(f);
}
"""
    found = rules(code, "cuda")
    assert {("static:state", "counter"), ("static:timer", "clock64"),
            ("static:fastmath", "__expf"), ("static:host", "host_helper"),
            ("static:stream", "<<<...>>>"), ("static:thread", "std::thread")} <= found
    assert not {s for _, s in found} & {"coeff", "dyn", "tile"}  # read-only / per-block


def test_what_the_recorded_source_does_is_excused() -> None:
    recorded = KernelSource("static int calls;\nvoid k(double *y) { calls++; y[0] = 1; }", "k")
    same = KernelSource("static int calls;\nvoid k(double *y) { calls += 1; y[0] = 1; }", "k")
    worse = KernelSource("static int calls;\nstatic double c;\n"
                         "void k(double *y) { calls++; c = y[0]; }", "k")
    assert new_findings(same, recorded) == []
    assert [f.symbol for f in new_findings(worse, recorded)] == ["c"]
    assert new_findings(KernelSource("def k(y: 'double *'): pass", "k", "python")) == []


def test_fast_math_smuggled_through_extra_options() -> None:
    found = check_options({"extra_options": "--use_fast_math -lineinfo"}, {})
    assert [f.symbol for f in found] == ["--use_fast_math"]
    assert check_options({"extra_options": "--use_fast_math"}, {}, bitwise=False) == []
    assert check_options({"extra_options": "--use_fast_math"},
                         {"extra_options": "--use_fast_math"}) == []


def test_unparsable_extra_options_are_a_finding() -> None:
    (f,) = check_options({"extra_options": '-ffast-math "'}, {})
    assert f.reason == "static:fastmath" and "cannot be parsed" in f.message
    # the recorded options themselves are excused, and nothing counts without bitwise checks
    assert check_options({"extra_options": '-O3 "'}, {"extra_options": '-O3 "'}) == []
    assert check_options({"extra_options": '-ffast-math "'}, {}, bitwise=False) == []


@pytest.mark.parametrize("flag", [
    "-ffp-contract=fast", "-ffp-contract=on", "-funsafe-math-optimizations",
    "-freciprocal-math", "-ffinite-math-only", "-fno-signed-zeros", "-fassociative-math",
    "-Ofast", "-fno-honor-nans", "-fapprox-func", "-fcx-limited-range", "-ffp-model=fast",
    "-mrecip", "-mdaz-ftz", "-fdenormal-fp-math=preserve-sign",
    "--use_fast_math", "-use_fast_math", "--ftz=true", "-ftz=true", "--prec-div=false",
    "-prec-sqrt=false", "--ftz true", "--prec-div false", "-Xcompiler -ffast-math",
    "-Xcompiler=-O3,-ffast-math", "--compiler-options=-ffast-math",
    "-DT=_Pragma(\"GCC optimize(\\\"fast-math\\\")\")", "-DF=__expf",
])
def test_every_fast_math_spelling_in_extra_options_is_found(flag: str) -> None:
    found = check_options({"extra_options": f"-lineinfo {flag} -O3"}, {})
    assert [f.reason for f in found] == ["static:fastmath"], (flag, found)
    assert check_options({"extra_options": f"-lineinfo {flag} -O3"}, {}, bitwise=False) == []


@pytest.mark.parametrize("flag", ["-ffp-contract=off", "-fno-fast-math", "--ftz=false",
                                  "--prec-div=true", "--fmad=true", "-O3", "-lineinfo",
                                  "--std=c++17", "-DTILE=16", "-Xcompiler -O2"])
def test_harmless_extra_options_are_not_found(flag: str) -> None:
    assert check_options({"extra_options": flag}, {}) == []


def test_response_files_and_hidden_calls_in_option_defines_are_found() -> None:
    assert [f.symbol for f in check_options({"extra_options": "@more.txt"}, {})] == ["@more.txt"]
    (f,) = check_options({"extra_options": "-D X=clock()"}, {}, bitwise=False)
    assert f.reason == "static:timer"


def test_fast_math_hidden_in_define_values() -> None:
    pragma = '_Pragma("GCC optimize(\\"fast-math\\")") 4'
    found = check_defines({"UNROLL": pragma, "TILE": "16", "EXP": "__expf", "T": "clock()"})
    assert sorted((f.reason, f.symbol) for f in found) == sorted([
        ("static:fastmath", "__expf"), ("static:fastmath", pragma),
        ("static:timer", "clock")])
    assert [f.reason for f in check_defines({"P": "_Pragma(\"STDC FP_CONTRACT ON\")"})] == \
        ["static:fastmath"]
    assert [f.reason for f in check_defines({"EXP": "__expf", "T": "clock()"},
                                            bitwise=False)] == ["static:timer"]
    assert check_defines({"EXP": "__expf"}, {"EXP": "__expf"}) == []  # the recorded one
    assert check_defines((("TILE", "16"),), ()) == []
