"""CPU backend specifics, with the real host compiler (no mocks)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends import cpu
from kernforge.backends.cpu import CpuBackend, apply_schedule, compiler_flags
from kernforge.core import (
    BackendUnavailableError,
    CompileError,
    CompileOptions,
    ConfigError,
    KernelSource,
    LaunchConfig,
    SignatureError,
    Variant,
)
from kernforge.testing.backends import SAMPLES

AXPY = SAMPLES["c"].axpy

PROBE = """\
void probe(int *out) {
#ifdef __OPTIMIZE__
    out[0] = 1;
#endif
#ifdef __OPTIMIZE_SIZE__
    out[1] = 1;
#endif
#ifdef __FAST_MATH__
    out[2] = 1;
#endif
#ifdef __AVX__
    out[3] = 1;
#endif
#ifdef SHIFT
    out[4] = SHIFT;
#endif
}
"""

THREADS = """\
#include <omp.h>
void nthreads(int *out) {
    #pragma omp parallel
    { if (omp_get_thread_num() == 0) out[0] = omp_get_num_threads(); }
    out[1] = omp_get_num_procs();
}
"""

OWNER = """\
#include <omp.h>
void owner(int *out, int n) {
    #pragma omp parallel for
    for (int i = 0; i < n; ++i) out[i] = omp_get_thread_num();
}
"""


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CpuBackend:
    try:
        b = CpuBackend()
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return b


def _run_int(backend: CpuBackend, variant: Variant, size: int, *extra: int,
             threads: int | None = None, tolerant: bool = False) -> list[int]:
    compiled = backend.compile(variant, tolerant=tolerant)
    out = np.zeros(size, np.int32)
    backend.launch(compiled, [out, *extra], LaunchConfig(threads=threads))
    return out.tolist()


# ---- knobs -> flags ---------------------------------------------------------------------------
def test_knobs_reach_the_compiler(backend: CpuBackend) -> None:
    src = KernelSource(PROBE, "probe")
    assert _run_int(backend, Variant(src, CompileOptions.of(opt_level="O0")), 5) == [0] * 5
    assert _run_int(backend, Variant(src), 5)[:3] == [1, 0, 0]
    assert _run_int(backend, Variant(src, CompileOptions.of(opt_level="Os")), 5)[:2] == [1, 1]
    fast = Variant(src, CompileOptions.of(fast_math=True))
    assert _run_int(backend, fast, 5, tolerant=True)[2] == 1
    assert _run_int(backend, Variant(src, defines=(("SHIFT", "7"),)), 5)[4] == 7


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 feature macro")
def test_march_native_uses_this_cpu(backend: CpuBackend) -> None:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    src = KernelSource(PROBE, "probe")
    assert _run_int(backend, Variant(src), 5)[3] == 0
    native = _run_int(backend, Variant(src, CompileOptions.of(march="native")), 5)[3]
    assert native == int(" avx " in flags)


def test_compiler_flags_table() -> None:
    base = {"opt_level": "O2", "march": "default", "unroll": False, "vectorize": "default",
            "fast_math": False}
    assert compiler_flags(base) == ["-O2", "-shared", "-fPIC", "-fopenmp", "-ffp-contract=off"]
    assert "-ffp-contract=fast" in compiler_flags({**base, "fp_contract": "fast"})
    flags = compiler_flags({**base, "opt_level": "O3", "march": "native", "unroll": True,
                            "vectorize": "on", "fast_math": True}, [("BS", "64")])
    assert flags[0] == "-O3"
    assert {"-march=native", "-funroll-loops", "-ftree-vectorize", "-ffast-math",
            "-DBS=64"} <= set(flags)
    assert "-fno-tree-vectorize" in compiler_flags({**base, "vectorize": "off"})


def test_info_records_flags_and_command(backend: CpuBackend) -> None:
    opts = CompileOptions.of(opt_level="O1", unroll=True, vectorize="off")
    compiled = backend.compile(Variant(AXPY, opts, defines=(("SHIFT", "1"),)))
    info = compiled.info
    assert {"-O1", "-funroll-loops", "-fno-tree-vectorize", "-DSHIFT=1"} <= set(info["flags"])
    assert "-fopenmp" in info["command"] and info["library"].endswith(".so")
    assert info["compiler"] == backend.identity()["compiler"]


# ---- OpenMP schedule and threads ----------------------------------------------------------------
def test_apply_schedule_rewrites_only_pragmas_without_schedule() -> None:
    code = ("#pragma omp parallel for\n"
            "  #  pragma  omp for nowait // comment\n"
            "#pragma omp parallel for simd\n"
            "#pragma omp parallel for schedule(static)\n"
            "#pragma omp parallel for \\\n    schedule(dynamic, 4)\n"
            "#pragma omp parallel\n"
            "#pragma omp forall\n")
    out = apply_schedule(code, "guided", 8).split("\n")
    assert out[0] == "#pragma omp parallel for schedule(guided, 8)"
    assert out[1] == "  #  pragma  omp for schedule(guided, 8) nowait // comment"
    assert out[2] == "#pragma omp parallel for simd schedule(guided, 8)"
    assert out[3:8] == code.split("\n")[3:8]
    assert apply_schedule(code, "static") .split("\n")[0].endswith("schedule(static)")
    assert apply_schedule(code, "default", 8) == code


def test_omp_schedule_changes_iteration_owners(backend: CpuBackend) -> None:
    src = KernelSource(OWNER, "owner")
    blocked = Variant(src, CompileOptions.of(omp_schedule="static"))
    assert _run_int(backend, blocked, 8, 8, threads=2) == [0, 0, 0, 0, 1, 1, 1, 1]
    cyclic = Variant(src, CompileOptions.of(omp_schedule="static", omp_chunk=1))
    assert _run_int(backend, cyclic, 8, 8, threads=2) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert _run_int(backend, cyclic, 8, 8, threads=1) == [0] * 8


def test_threads_are_honoured_per_launch(backend: CpuBackend) -> None:
    variant = Variant(KernelSource(THREADS, "nthreads"))
    assert _run_int(backend, variant, 2, threads=3)[0] == 3
    assert _run_int(backend, variant, 2, threads=1)[0] == 1
    default, procs = _run_int(backend, variant, 2)
    assert default == procs >= 1


# ---- tolerance-only knobs -----------------------------------------------------------------------
def test_fast_math_needs_a_tolerance(backend: CpuBackend) -> None:
    variant = Variant(AXPY, CompileOptions.of(fast_math=True))
    with pytest.raises(ConfigError, match="fast_math"):
        backend.compile(variant)
    compiled = backend.compile(variant, tolerant=True)
    assert "-ffast-math" in compiled.info["flags"]


# ---- disk cache ---------------------------------------------------------------------------------
_CHILD = """\
import json, numpy as np
from kernforge.backends.cpu import CpuBackend
from kernforge.core import Variant
from kernforge.testing.backends import SAMPLES
b = CpuBackend()
c = b.compile(Variant(SAMPLES["c"].axpy))
x, y = np.arange(4.0), np.ones(4)
b.launch(c, [x, y, 2.0, 4])
print(json.dumps({"info": c.info, "y": y.tolist()}))
"""


def test_disk_cache_is_reused_by_another_process(backend: CpuBackend, tmp_path: Path) -> None:
    first = backend.compile(Variant(AXPY))
    assert first.info["disk_cache"] is False
    env = {**os.environ, "KERNFORGE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    child = json.loads(proc.stdout)
    assert child["info"]["disk_cache"] is True
    assert child["info"]["library"] == first.info["library"]
    assert child["y"] == [1.0, 3.0, 5.0, 7.0]
    files = sorted(p.name for p in (tmp_path / "cache" / "cpu").iterdir())
    assert files == [Path(first.info["library"]).name], "no temporary files are left behind"


def test_disk_cache_key_changes_with_flags_and_source(backend: CpuBackend) -> None:
    a = backend.compile(Variant(AXPY)).info["library"]
    b = backend.compile(Variant(AXPY, CompileOptions.of(opt_level="O3"))).info["library"]
    c = backend.compile(Variant(AXPY.with_code(AXPY.code + "\n"))).info["library"]
    d = backend.compile(Variant(AXPY, CompileOptions.of(omp_schedule="dynamic"))).info["library"]
    e = backend.compile(Variant(AXPY, constants=(("n", 8),))).info["library"]
    assert len({a, b, c, d, e}) == 5


# ---- failures -----------------------------------------------------------------------------------
def test_compile_error_carries_the_compiler_message(backend: CpuBackend) -> None:
    with pytest.raises(CompileError) as err:
        backend.compile(Variant(SAMPLES["c"].broken))
    assert "axpy" in err.value.message
    assert "kf_undeclared_identifier" in err.value.message
    assert "kf_undeclared_identifier" in err.value.log
    assert not list((Path(os.environ["KERNFORGE_CACHE_DIR"]) / "cpu").glob("*.part"))


def test_compile_timeout_is_a_compile_error(backend: CpuBackend,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "COMPILE_TIMEOUT_S", 0.0001)
    with pytest.raises(CompileError, match="timed out"):
        backend.compile(Variant(AXPY))


def test_undefined_function_and_static_entry_are_compile_errors(backend: CpuBackend) -> None:
    undefined = KernelSource("double kf_missing(double);\n"
                             "void f(double *x) { x[0] = kf_missing(x[0]); }\n", "f")
    with pytest.raises(CompileError, match="does not load"):
        backend.compile(Variant(undefined))
    static = KernelSource("static void g(double *x) { x[0] = 1; }\n", "g")
    with pytest.raises(CompileError, match="exports no symbol"):
        backend.compile(Variant(static))


def test_half_scalar_is_refused(backend: CpuBackend) -> None:
    src = KernelSource("void h(float *o, _Float16 s) { o[0] = s; }\n", "h")
    with pytest.raises(SignatureError, match="'s'"):
        backend.compile(Variant(src))


def test_missing_compiler_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/bin/cc")
    with pytest.raises(BackendUnavailableError, match="/nonexistent/bin/cc") as err:
        CpuBackend()
    assert err.value.hint and "CC" in err.value.hint


def test_non_compiler_cc_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "false")
    with pytest.raises(BackendUnavailableError, match="--version"):
        CpuBackend()


# ---- identity and cache flush ----------------------------------------------------------------
def test_identity(backend: CpuBackend) -> None:
    ident = backend.identity()
    assert ident["device"] and ident["cores"] == os.cpu_count()
    assert "cc" in ident["compiler"] or "clang" in ident["compiler"]
    assert ident["openmp"].isdigit()


def test_flush_buffer_is_twice_the_llc_and_reused(backend: CpuBackend) -> None:
    backend._touched = {}  # nothing launched yet: nothing known to evict but the whole LLC
    backend.flush_cache()
    buf = backend._flush
    assert buf is not None and buf.nbytes >= 2 * cpu.llc_bytes()
    backend.flush_cache()
    assert backend._flush is buf and int(buf[0]) == 2


def test_threads_default_follows_omp_num_threads(monkeypatch) -> None:
    from kernforge.backends.cpu import default_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1,2")
    assert default_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "bogus")
    assert default_threads() >= 1


def test_no_thread_count_means_the_applications_openmp_default(tmp_path) -> None:
    """OMP_NUM_THREADS=1 is honoured when the launch names no thread count."""
    import os
    import subprocess
    import sys

    script = (
        "import numpy as np, kernforge\n"
        f"k = kernforge.Kernel({THREADS!r}, 'nthreads', backend='cpu')\n"
        "out = np.zeros(2, np.int32); k(out); print(out[0])\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "KERNFORGE_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", script], check=False, env=env, capture_output=True,
                       text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
