"""The ``zmarch`` rewrite: where it applies, and that it keeps results bitwise identical for any
number of z points per thread (the kernels run on the host CUDA emulator, no GPU needed)."""

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


def _host_form(code: str, n: int) -> str:
    """The host emulator passes arrays only: the scalars become macros."""
    code = re.sub(r",\s*real_t alpha, int n\)", ")", code)
    return f"#define n {n}\n#define alpha ((real_t)0.1f)\n" + code


def _run(code: str, u: np.ndarray, grid: tuple[int, int, int], block: tuple[int, int, int],
         defines: dict[str, object] | None = None) -> np.ndarray:
    from kernforge.stencil import emulate as emu

    mod = emu.compile_source(_host_form(code, u.shape[0]), ("heat_stencil",), defines)
    out = np.full_like(u, np.nan)
    mod.launch("heat_stencil", [u, out], grid, block)
    return out


@pytest.fixture(scope="module")
def rewritten() -> str:
    new = zmarch(HEAT, "cuda")
    assert new is not None
    return new


def test_heat_stencil_gets_a_register_queue(rewritten: str) -> None:
    assert "#ifndef KF_ZC" in rewritten and "for (int kf_t = 0; kf_t < KF_ZC; ++kf_t)" in rewritten
    # the three z reads become registers; the in-plane reads stay loads
    assert "u[c - sz]" not in rewritten.split("kf_t == 0")[1].split("\n", 1)[1]
    assert "kf_u_m + kf_u_p" in rewritten and "u[c - sy] + u[c + sy]" in rewritten
    assert "return;" not in rewritten and "zmarch" in applicable(HEAT, "cuda")
    assert zmarch(rewritten, "cuda") is None  # applied once


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="no host C++ compiler")
@pytest.mark.parametrize(("per_thread", "block"), [(1, (4, 2, 2)), (2, (4, 2, 2)),
                                                   (3, (8, 4, 1)), (4, (4, 4, 2)),
                                                   (16, (8, 2, 1))])
def test_bitwise_identical_for_any_points_per_thread(rewritten: str, per_thread: int,
                                                     block: tuple[int, int, int]) -> None:
    n = 11  # not a multiple of any block or coarsening: partial blocks and columns
    rng = np.random.default_rng(per_thread)
    u = rng.standard_normal((n, n, n)).astype(np.float32)
    grid = tuple(-(-n // b) for b in block)
    want = _run(HEAT, u, grid, block)  # type: ignore[arg-type]
    launch = coarsened(LaunchConfig(grid=grid, block=block), per_thread)
    got = _run(rewritten, u, launch.grid, block, {"KF_ZC": per_thread})
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_rewrite_compiles_with_nvcc(rewritten: str, tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(rewritten)
    for per_thread in (1, 8):
        proc = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", f"-DKF_ZC={per_thread}", "-o",
                               str(tmp_path / "k.ptx"), str(src)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        loads = (tmp_path / "k.ptx").read_text().count("ld.global")
        # 7 reads per point in the original; the queue leaves 4 in-plane reads + 1 per point
        assert loads == (7 if per_thread == 1 else 5 * per_thread + 2), loads


@pytest.mark.parametrize("change", [
    ("if (i >= n || j >= n || k >= n) return;", "if (i >= n || j >= n) return;"),  # no z bound
    ("k >= n) return;", "k < 2) return;"),  # a guard that does not stay true along z
    ("const real_t* __restrict__ u", "const real_t* u"),  # reads may alias the writes
    ("const long long c = k * sz + j * sy + i;",
     "const long long c = k * sz + j * sy + i + k;"),  # not linear in k with one stride
    ("un[c] = u[c] + alpha * lap;",
     "for (int r = 0; r < 2; ++r) un[c] = u[c] + alpha * lap;"),  # a loop in the body
])
def test_not_applied_where_it_would_be_unsafe(change: tuple[str, str]) -> None:
    old, new = change
    assert old in HEAT
    assert zmarch(HEAT.replace(old, new), "cuda") is None


def test_not_applied_to_c_or_kernels_without_a_z_index() -> None:
    module = "typedef float real_t;\n" + sources("heat3d_cupy.py")["MODULE"]
    assert zmarch(module, "cuda") is None
    assert zmarch(HEAT, "c") is None


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
