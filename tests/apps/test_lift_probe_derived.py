"""Probing a kernel whose grid extents are compile-time constants (no integer parameter gives
them) and whose third output is the product of the other two's new values: modelled on
rtm8's two wave fields and their image."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.lift_probe_derived import strides
from kernforge.apps.lift_regions import NotLifted
from kernforge.apps.program_binding import bind_probed
from kernforge.stencil import emulate as em
from kernforge.stencil.program import apply, error_bound
from kernforge.stencil.program import codegen_plain as plain
from kernforge.stencil.program import codegen_tiled as tiled
from kernforge.stencil.program import expr as ex

from .lift_kernels import Case, EmulatedTarget
from .program_ops_helpers import run_standalone
from .stencil_kernels import target

NX, NY, NZ = 14, 12, 11
SOURCE = rf"""
#define NX {NX}
#define NY {NY}
#define NZ {NZ}
// two wave fields stepped together away from the faces, and their product: the extents are
// macros, the only integer parameter is the element count
extern "C" __global__ void waves_image(const float* c2, const float* us, const float* ur,
                                       float* ns, float* nr, float* img, long total) {{
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z;
  if (x < 2 || x >= NX - 2 || y < 2 || y >= NY - 2 || z < 2 || z >= NZ - 2) return;
  int p = x + NX * (y + NY * z);
  float ls = -6.0f * us[p] + us[p - 1] + us[p + 1] + us[p - NX] + us[p + NX]
      + us[p - NX * NY] + us[p + NX * NY] + 0.25f * (us[p - 2] + us[p + 2 * NX * NY]);
  float lr = -6.0f * ur[p] + ur[p - 1] + ur[p + 1] + ur[p - NX] + ur[p + NX]
      + ur[p - NX * NY] + ur[p + NX * NY] + 0.25f * (ur[p - 2] + ur[p + 2 * NX * NY]);
  ns[p] = 2.0f * us[p] - ns[p] + c2[p] * ls;
  nr[p] = 2.0f * ur[p] - nr[p] + c2[p] * lr;
  img[p] = ns[p] * nr[p];
}}
"""


def _waves() -> EmulatedTarget:
    case = Case("waves_image", (("buf", "float32"),) * 6 + (("i64", NX * NY * NZ),),
                (NZ, NY, NX), (1, 1, NZ), (16, 16, 1))
    return EmulatedTarget(case, SOURCE)


@pytest.mark.slow
def test_extents_from_the_footprint_and_an_output_that_is_a_product() -> None:
    t = _waves()
    got = lift_probe(t)  # type: ignore[arg-type]
    assert isinstance(got, Probed), got
    p = got.program
    assert got.shape == (NX, NY, NZ) and p.dims == 3
    assert {(f.rule, f.width) for f in p.faces} == {("keep", 2)}
    img = p.output("p5").expr
    assert img == ex.Bin("*", p.output("p3").expr, p.output("p4").expr)  # the new values' product
    # the program is the kernel on fresh contents, the image included
    rng = np.random.default_rng(5)
    fresh = {i: rng.uniform(-1, 1, (NZ, NY, NX)).astype(np.float32) for i in range(6)}
    out = t.run({i: a.view(np.uint8).ravel() for i, a in fresh.items()})
    arrays = {f"p{i}": a for i, a in fresh.items()}
    want = apply(p, arrays).outputs
    bound = error_bound(p, arrays)
    for i in (3, 4, 5):
        have = out[i].view(np.float32).reshape(NZ, NY, NX)
        assert np.all(np.abs(have - want[f"p{i}"]) <= bound[f"p{i}"]), i
    assert np.abs(want["p5"] - fresh[5]).max() > 1e-2  # the image was computed


def test_strides_read_a_grid_off_a_star_footprint() -> None:
    star = {0, 1, -1, 2, -2, 20, -20, 320, -320}
    assert strides(star, 20 * 16 * 12)[0] == (20, 16, 12)
    assert strides({0, 1, -1, 24, -24}, 24 * 40)[0] == (24, 40, 1)
    assert strides({0, 1, -1, 2}, 1000) == []  # nothing past the reach: a line


def test_a_small_term_beside_large_values_is_kept() -> None:
    """hotspot3D's datasets: temperatures near 323 and power near 0.002, so the power term is
    a few millionths of the largest one, yet well above what the outputs' rounding hides."""
    from .test_lift_probe_hecbench import SOURCE as HEAT
    nx, ny, nz = 32, 16, 8
    n = nx * ny * nz
    case = Case("heat_clamped", (("buf", "float32"),) * 3 + (
        ("int", nx), ("int", ny), ("int", nz), ("f32", 0.1), ("f32", 0.05), ("f32", 0.02),
        ("f32", 0.66), ("f32", 0.3), ("f32", 80.0)), (nz, ny, nx), (1, 4, 1), (32, 4, 1),
        fixed={0: (323.0,) * n, 1: (0.002,) * n})
    t = EmulatedTarget(case, HEAT)
    got = lift_probe(t)  # type: ignore[arg-type]
    assert isinstance(got, Probed), got
    poly = ex.polynomial(got.program.outputs[0].expr)
    assert abs(poly[(("p1", (0, 0, 0)),)] - 0.3) < 1e-3  # the power term
    rng = np.random.default_rng(9)
    temp = (323 + rng.uniform(-8, 8, (nz, ny, nx))).astype(np.float32)
    power = rng.uniform(0, 0.004, (nz, ny, nx)).astype(np.float32)
    out = t.run({0: temp.view(np.uint8).ravel(), 1: power.view(np.uint8).ravel()})
    arrays = {"p0": temp, "p1": power}
    want = apply(got.program, arrays).outputs["p2"]
    bound = error_bound(got.program, arrays)["p2"]
    assert np.all(np.abs(out[2].view(np.float32).reshape(nz, ny, nx) - want) <= bound)


@pytest.mark.slow
@pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")
def test_operators_for_the_probed_product_program() -> None:
    """Both designs generated for the probed program compute it (the image included)."""
    got = lift_probe(_waves())  # type: ignore[arg-type]
    assert isinstance(got, Probed), got
    p, b = got.program, bind_probed(got)
    rng = np.random.default_rng(6)
    fresh = {n: rng.uniform(-1, 1, (NZ, NY, NX)).astype(np.float32) for n in b.fields}
    want = apply(p, fresh).outputs
    bound = error_bound(p, fresh)
    for k in (plain.generate(p, b, bx=8, by=4, bz=2), tiled.generate(p, b, tx=8, ty=2, py=2,
                                                                      lz=3)):
        arrays = {n: a.ravel().copy() for n, a in fresh.items()}
        run_standalone(k, arrays)
        for name, value in want.items():
            err = np.abs(arrays[name].reshape(NZ, NY, NX) - value)
            assert np.all(err <= 2 * bound[name]), (k.key, name, float(err.max()))


def test_a_fill_is_refused_as_one() -> None:
    def fill(b: dict[int, np.ndarray]) -> None:  # heat's zero: reads nothing
        b[0][:] = 0.0
    r = lift_probe(target(fill, {0: ("float64", 64 * 64)}, (64,), "float64"))
    assert isinstance(r, NotLifted) and "a fill" in r.reason, r
