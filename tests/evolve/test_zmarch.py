"""The ``zmarch`` rewrite: where it applies, and that it changes no result and reads no element
the original does not read, for any number of z points per thread (the kernels run on the host
CUDA emulator with every read of the input counted; no GPU needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends.cuda_tuning import coarsen_values, coarsened
from kernforge.core import KernelSource, LaunchConfig, Variant
from kernforge.evolve.proposers.rules import applicable
from kernforge.evolve.proposers.zmarch import zmarch

from .test_proposers_offline import sources

HEAT = "typedef float real_t;\n" + sources("heat3d_cupy.py")["STENCIL"]
NX, NY, NZ = 5, 6, 11
HOST = shutil.which("c++") or shutil.which("g++")
# counts every read of the input u (the emulator runs blocks on host threads: atomics)
COUNTED = r"""
struct KfCount { const float* p; unsigned int* n; long long size;
  float operator[](long long i) const {
    if (i < 0 || i >= size) { atomicAdd(&n[size], 1u); return 0.0f; }
    atomicAdd(&n[i], 1u); return p[i]; } };
"""
HEAD = r"""
extern "C" __global__ void kern(const float* __restrict__ u, float* __restrict__ o,
                                unsigned int* reads)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
"""
STD = r"""
    const int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= NX || j >= NY || k >= NZ) return;
    const long long sz = (long long)NX * NY;
    const long long c = k * sz + j * NX + i;
    if (k == 0 || k == NZ - 1) { o[c] = u[c]; return; }
"""


def kernel(body: str, pre: str = "", dims: tuple[int, int, int] = (NX, NY, NZ)) -> str:
    nx, ny, nz = dims
    return f"#define NX {nx}\n#define NY {ny}\n#define NZ {nz}\n{pre}{HEAD}{body}}}\n"


def _counted(code: str, size: int) -> str:
    """Every ``u[...]`` read through a counter of ``reads`` (size + 1: the last counts reads
    out of bounds)."""
    at = code.index("{", code.index("kern("))
    tail = re.sub(r"(?<![\w.])u\s*\[", "kf_cnt[", code[at + 1:])
    return COUNTED + code[:at + 1] + f" KfCount kf_cnt{{u, reads, {size}}};" + tail


def _run(code: str, u: np.ndarray, grid: tuple[int, ...], block: tuple[int, ...],
         defines: dict[str, object] | None = None) -> tuple[np.ndarray, np.ndarray]:
    from kernforge.stencil import emulate as emu

    mod = emu.compile_source(_counted(code, u.size), ("kern",), defines)
    out = np.full_like(u, np.nan)
    reads = np.zeros(u.size + 1, np.uint32)
    mod.launch("kern", [u, out, reads], grid, block)
    return out, reads


def check(code: str, *, dims: tuple[int, int, int] = (NX, NY, NZ),
          blocks=((4, 2, 2), (8, 4, 1), (4, 4, 4)), per_thread=(1, 2, 3, 4, 16),
          grid_z: int | None = None) -> np.ndarray:
    """Original vs rewrite (grid z divided, KF_ZN set as the tuner sets it): bitwise equal
    outputs, no element read that the original does not read; the rewrite's read counts."""
    new = zmarch(code, "cuda")
    assert new is not None, "zmarch did not apply"
    nx, ny, nz = dims
    size = nx * ny * nz
    u = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    counts = np.zeros(size + 1, np.int64)
    for block in blocks:
        grid = (-(-nx // block[0]), -(-ny // block[1]), grid_z or -(-nz // block[2]))
        want, seen = _run(code, u, grid, block)
        for zc in per_thread:
            launch = coarsened(LaunchConfig(grid=grid, block=block), zc)
            got, reads = _run(new, u, launch.grid, block,
                              {"KF_ZC": zc, "KF_ZN": grid[2] * block[2]})
            assert np.array_equal(want.view(np.uint32), got.view(np.uint32)), (block, zc)
            assert not np.any((reads > 0) & (seen == 0)), (block, zc, "read more")
            counts = reads.astype(np.int64) if zc == max(per_thread) else counts
    return counts


needs_host = pytest.mark.skipif(HOST is None, reason="no host C++ compiler")


def test_heat_stencil_gets_a_register_queue() -> None:
    new = zmarch(HEAT, "cuda")
    assert new is not None and "zmarch" in applicable(HEAT, "cuda")
    assert "for (int kf_t = 0; kf_t < KF_ZC; ++kf_t)" in new and "KF_ZN" in new
    assert "(kf_u_mv ? kf_u_m : (kf_u_mv = true, kf_u_m = u[c - sz]))" in new
    assert "u[c - sy] + u[c + sy]" in new  # in-plane reads stay loads
    assert "return;" not in new
    assert zmarch(new, "cuda") is None  # applied once


@needs_host
def test_heat_stencil_is_bitwise_identical_and_reads_less(tmp_path: Path) -> None:
    n = 11
    code = HEAT.replace("extern \"C\" __global__ void heat_stencil(const real_t* __restrict__ "
                        "u, real_t* __restrict__ un,\n                                        "
                        "real_t alpha, int n)", "")
    assert code != HEAT
    body = code[code.index("{") + 1:code.rindex("}")]
    body = body.replace("un[c]", "o[c]").replace("alpha", "0.1f")
    for decl in ("const int i = blockIdx.x * blockDim.x + threadIdx.x;",
                 "const int j = blockIdx.y * blockDim.y + threadIdx.y;"):
        body = body.replace(decl, "")
    src = kernel(body, f"typedef float real_t;\n#define n {n}\n", (n, n, n))
    reads = check(src, dims=(n, n, n))
    total = int(reads.sum())
    assert reads[-1] == 0 and total < 7 * n ** 3 * 0.75  # far fewer than 7 per interior point


@needs_host
@pytest.mark.parametrize("body", [
    # a guard that is not monotone in k (the queue only reuses what this thread loaded)
    STD.replace("k >= NZ) return;", "k >= NZ || (k & 1)) return;")
    + "    o[c] = u[c - sz] + u[c] + u[c + sz];\n",
    # reads below k = 0 that the original makes (ghost planes), and above the guard's bound
    ("    const int k = blockIdx.z * blockDim.z + threadIdx.z;\n"
    "    if (i >= NX || j >= NY || k >= NZ - 2) return;\n"
    "    const long long sz = (long long)NX * NY;\n"
    "    const long long c = k * sz + sz + j * NX + i;\n"
    "    o[c] = u[c - sz] + u[c] + u[c + sz];\n"),
    # reads in branches: the rewrite must not read what the original does not
    ("    const int k = blockIdx.z * blockDim.z + threadIdx.z;\n"
    "    if (j >= NY || k >= NZ) return;\n"
    "    const long long sz = (long long)NX * NY;\n"
    "    const long long c = k * sz + j * NX + i;\n"
    "    if (i >= NX) return;\n"
    "    if (k >= 1 && k < NZ - 1) o[c] = u[c] - u[c - sz]; else o[c] = 0.0f;\n"),
])
def test_kernels_the_old_queue_got_wrong_are_right_now(body: str) -> None:
    check(kernel(body))


@needs_host
def test_a_grid_shorter_than_the_guard_stops_where_the_launch_did() -> None:
    body = STD + "    o[c] = u[c - sz] + u[c] + u[c + sz];\n"
    check(kernel(body), blocks=((4, 2, 1),), per_thread=(3, 5), grid_z=8)


@pytest.mark.parametrize("change", [
    "    o[c] = u[c - sz] + u[c] + u[c + sz] + (float)threadIdx.z;\n",  # a z built-in
    "    o[c] = f(u[c - sz]) + u[c] + u[c + sz];\n",  # a function of the source
    "    { const long long c = 0; o[c] = u[c]; }\n    o[c] = u[c - sz] + u[c + sz];\n",  # shadow
    "    float* w = (float*)u; w[c] = 1.0f;\n    o[c] = u[c - sz] + u[c + sz];\n",  # cast
    "    SKIP(k == 4);\n    o[c] = u[c - sz] + u[c] + u[c + sz];\n",  # a macro hiding return
    "    o[c] = __shfl_down_sync(0xffffffffu, u[c - sz] + u[c + sz], 16);\n",  # a warp op
    "    for (int r = 0; r < 2; ++r) o[c] = u[c - sz] + u[c + sz];\n",  # a loop
])
def test_not_applied_where_it_would_be_unsafe(change: str) -> None:
    pre = "#define SKIP(x) if (x) return\n__device__ float f(float v) { return v; }\n"
    plain = kernel(STD + "    o[c] = u[c - sz] + u[c] + u[c + sz];\n", pre)
    assert zmarch(plain, "cuda") is not None
    assert zmarch(kernel(STD + change, pre), "cuda") is None


@pytest.mark.parametrize(("old", "new"), [
    ("const long long c = k * sz + j * NX + i;",
     "int kk; kk = k;\n    const long long c = k * sz + j * NX + i + kk;"),  # k in disguise
    ("const long long sz = (long long)NX * NY;",
     "const long long sz = (long long)NX * NY + (k & 1);"),  # a stride that varies with k
    ("const int k = blockIdx.z * blockDim.z + threadIdx.z;",
     "const int k = blockIdx.z * blockDim.z + threadIdx.z;\n    const int &kr = k;"),  # a ref
])
def test_not_applied_when_the_index_is_not_linear_in_k(old: str, new: str) -> None:
    code = kernel(STD + "    o[c] = u[c - sz] + u[c] + u[c + sz];\n")
    assert old in code
    assert zmarch(code.replace(old, new), "cuda") is None


def test_not_applied_to_c_or_kernels_without_a_z_index() -> None:
    module = "typedef float real_t;\n" + sources("heat3d_cupy.py")["MODULE"]
    assert zmarch(module, "cuda") is None
    assert zmarch(HEAT, "c") is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_rewrite_compiles_with_nvcc(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(zmarch(HEAT, "cuda") or "")
    for per_thread in (1, 8):
        proc = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", f"-DKF_ZC={per_thread}",
                               "-DKF_ZN=256", "-o", str(tmp_path / "k.ptx"), str(src)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_tuner_dimension_and_grid() -> None:
    launch = LaunchConfig(grid=(8, 64, 128), block=(32, 4, 2))
    plain = Variant(KernelSource(HEAT, "heat_stencil", "cuda"), launch=launch)
    assert coarsen_values(plain) == ()
    coarse = Variant(KernelSource(zmarch(HEAT, "cuda") or "", "heat_stencil", "cuda"),
                     launch=launch)
    assert coarsen_values(coarse) == (1, 2, 4, 8, 16)
    assert coarsen_values(coarse.with_(defines={"KF_ZC": 4})) == ()
    assert coarsened(launch, 16).grid == (8, 64, 8)
    assert coarsened(LaunchConfig(grid=(1, 1, 5), block=(32, 1, 1)), 4).grid == (1, 1, 2)
    small = Variant(coarse.source, launch=LaunchConfig(grid=(8, 8, 3), block=(32, 4, 2)))
    assert coarsen_values(small) == (1, 2)
    # another kernel of the same module was rewritten, not the entry: nothing to search
    other = "extern \"C\" __global__ void other(float* p) { p[0] = 1.0f; }\n"
    module = Variant(KernelSource(coarse.source.code + other, "other", "cuda"), launch=launch)
    assert coarsen_values(module) == ()
