"""Offline rewrite rules on the repository's example kernels: each variant compiles."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernforge.core import Status
from kernforge.evolve.proposers import make_proposer
from kernforge.evolve.proposers.rules import applicable, grid_stride, ldg, restrict_const, unroll
from kernforge.evolve.types import Program, ProposalRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sources(name: str) -> dict[str, str]:
    text = (EXAMPLES / name).read_text()
    found = re.finditer(r'(\w+) = r"""(.*?)"""', text, re.DOTALL)
    return {m.group(1): m.group(2) for m in found}


def compile_c(code: str, tmp_path: Path) -> None:
    src = tmp_path / "k.c"
    src.write_text(code)
    proc = subprocess.run(["cc", "-fsyntax-only", "-fopenmp", "-Wall", "-Werror=pragmas",
                           str(src)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def compile_cuda(code: str, tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text("typedef double real_t;\n" + code)
    proc = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"),
                           str(src)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_c_rules_compile(tmp_path: Path) -> None:
    produced = 0
    for code in sources("heat3d_cpu.py").values():
        for rule, new in applicable(code, "c").items():
            compile_c(new, tmp_path)
            produced += 1
            assert rule != "unroll" or "#pragma GCC unroll 4" in new
    assert produced >= 1


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_rules_compile(tmp_path: Path) -> None:
    seen = set()
    for example in ("heat3d_cupy.py", "jacobi2d_cupy.py"):
        for code in sources(example).values():
            for rule, new in applicable(code, "cuda").items():
                compile_cuda(new, tmp_path)
                seen.add(rule)
    assert {"unroll", "ldg", "grid_stride"} <= seen


def test_restrict_and_const_on_read_only_pointers() -> None:
    code = "void f(double *a, double *b, int n) { for (int i = 0; i < n; i++) b[i] = a[i]; }"
    new = restrict_const(code, "c")
    assert new is not None
    assert "const double * restrict a" in new and "double * restrict b" in new
    assert "const double * restrict b" not in new
    assert restrict_const(new, "c") is None  # idempotent


def test_pointer_passed_to_a_call_is_not_made_const() -> None:
    code = "void g(float *p);\nvoid f(float *p) { g(p); }"
    assert "const" not in (restrict_const(code, "c") or "")


def test_ldg_only_on_const_restrict_builtin_reads() -> None:
    code = ('extern "C" __global__ void k(const float* __restrict__ a, float* __restrict__ b, '
            'const float* c) { int i = threadIdx.x; b[i] = a[i] + c[i]; }')
    new = ldg(code, "cuda")
    assert new is not None and "__ldg(&a[i])" in new and "c[i]" in new and "__ldg(&c" not in new
    assert ldg(new, "cuda") is None


def test_ldg_sees_through_a_typedef_of_a_builtin_type() -> None:
    # the CuPy example compiles "typedef float real_t;" + its kernel, and that is what is recorded
    stencil = sources("heat3d_cupy.py")["STENCIL"]
    new = ldg("typedef float real_t;\n" + stencil, "cuda")
    assert new is not None and "__ldg(&u[c - 1])" in new and "__ldg(&un" not in new
    assert ldg(stencil, "cuda") is None  # real_t unknown: not assumed to be a builtin
    assert ldg("typedef struct S real_t;\n" + stencil, "cuda") is None


def test_unroll_skips_collapse_nests_and_pragmas() -> None:
    code = ("void f(double *a, int n) {\n  #pragma omp parallel for collapse(2)\n"
            "  for (int i = 0; i < n; i++) {\n    for (int j = 0; j < n; j++) a[i*n+j] = 0;\n  }\n}")
    assert unroll(code, "c") is None
    assert unroll(code.replace(" collapse(2)", ""), "c") is not None


def test_grid_stride_only_for_the_simple_pattern() -> None:
    code = ('extern "C" __global__ void k(float* a, int n) {\n'
            '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) a[i] *= 2.0f;\n}')
    new = grid_stride(code, "cuda")
    assert new is not None and "i += (int)gridDim.x * blockDim.x" in new
    assert grid_stride(code.replace("a[i] *= 2.0f", "{ a[i] = 0; return; }"), "cuda") is None


def _request(code: str, seed: int = 0) -> ProposalRequest:
    parent = Program(id="p", code=code, parent_id=None, island=0, generation=0,
                     fitness=1e-3, status=Status.OK)
    return ProposalRequest(island=0, parent=parent, inspirations=(), contract="", seed=seed)


def test_offline_proposer_compounds_and_reports_when_done() -> None:
    proposer = make_proposer("offline")
    code = sources("jacobi2d_cupy.py")["RELAX"]
    models = set()
    for seed in range(10):
        p = proposer.propose(_request(code, seed))
        if p.code is None:
            break
        models.add(p.model)
        assert p.diff_text.startswith("---")
        code = p.code
    assert models == {"offline:ldg", "offline:grid_stride", "offline:unroll"}
    final = proposer.propose(_request(code))
    assert final.code is None and "no offline rule" in (final.error or "")


def test_the_cpu_examples_max_change_gets_a_proposal() -> None:
    """Issue 43 item 8: the offline proposer failed 18 of 18 calls on max_change: its pointers
    were already const/restrict and its one loop, an OpenMP max-reduction, is no nest to
    unroll. omp_simd applies to it (a max is exact in any order)."""
    p = make_proposer("offline").propose(_request(sources("heat3d_cpu.py")["MAX_CHANGE"]))
    assert p.code is not None and p.model == "offline:omp_simd", p.error
    assert "#pragma omp parallel for simd reduction(max:m)" in p.code


def test_omp_simd_leaves_sums_nests_and_simd_loops_alone() -> None:
    from kernforge.evolve.proposers.rules import omp_simd

    body = "{{\n    double s = 0;\n    {pragma}\n    for (long i = 0; i < n; i++) {loop}\n}}\n"
    head = "void f(const double *restrict x, double *restrict y, long n)\n"

    def src(pragma: str, loop: str = "s += x[i];") -> str:
        return head + body.format(pragma=pragma, loop=loop)

    assert omp_simd(src("#pragma omp parallel for reduction(+:s)"), "c") is None
    assert omp_simd(src("#pragma omp parallel for simd"), "c") is None
    assert omp_simd(src("#pragma omp parallel for collapse(2)"), "c") is None
    assert omp_simd(src("#pragma omp parallel for", "{ for (long j = 0; j < n; j++) y[j] = 0; }"),
                    "c") is None
    assert "for simd reduction(min:s)" in omp_simd(src("#pragma omp parallel for reduction(min:s)"),
                                                   "c")
    assert "parallel for simd" in omp_simd(src("#pragma omp parallel for", "y[i] = x[i];"), "c")


def test_omp_simd_keeps_max_change_bitwise() -> None:
    import numpy as np

    import kernforge
    from kernforge.core import BackendUnavailableError
    from kernforge.evolve.proposers.rules import omp_simd

    code = sources("heat3d_cpu.py")["MAX_CHANGE"]
    rng = np.random.default_rng(1)
    u, v = rng.standard_normal(100_003), rng.standard_normal(100_003)
    out = []
    for c in (code, omp_simd(code, "c")):
        try:
            k = kernforge.Kernel(c, "max_change", backend="cpu")
        except BackendUnavailableError as exc:
            pytest.skip(str(exc))
        res = np.zeros(1)
        k(u, v, res, np.int64(u.size))
        out.append(res[0])
    assert out[0] == out[1] == np.max(np.abs(v - u))
