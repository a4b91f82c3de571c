"""Probing kernels modelled on HeCBench's that lifting got wrong or refused vaguely: iso2dfd's
velocity-weighted Laplacian (a product of fields with a tiny coefficient), hotspot3D's clamped
boundary on an 8-layer grid, hotspot's pyramid (several steps per launch), and a term that only
shows at some magnitudes (caught by the check on fresh inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.lift_regions import NotLifted
from kernforge.stencil.program import apply
from kernforge.stencil.program import expr as ex

from .lift_kernels import Case, EmulatedTarget
from .stencil_kernels import shifted, target

SOURCE = r"""
// a 2D wave step: next = 2 prev - next + k * vel * lap(prev), only away from the edges
extern "C" __global__ void wave_vel(float* next, const float* prev, const float* vel,
                                    float k, size_t rows, size_t cols) {
  size_t c = blockDim.x * blockIdx.x + threadIdx.x;
  size_t r = blockDim.y * blockIdx.y + threadIdx.y;
  if (r >= 1 && r + 1 < rows && c >= 1 && c + 1 < cols) {
    size_t p = r * cols + c;
    float lap = prev[p - 1] + prev[p + 1] + prev[p - cols] + prev[p + cols] - 4.0f * prev[p];
    next[p] = 2.0f * prev[p] - next[p] + lap * (k * vel[p]);
  }
}

// a 3D heat step marching along z, every neighbour clamped to the grid
extern "C" __global__ void heat_clamped(const float* t, const float* pw, float* out, int nx,
                                        int ny, int nz, float cx, float cy, float cz,
                                        float cc, float cp, float amb) {
  int x = blockDim.x * blockIdx.x + threadIdx.x;
  int y = blockDim.y * blockIdx.y + threadIdx.y;
  if (x >= nx || y >= ny) return;
  int w = x == 0 ? x : x - 1, e = x == nx - 1 ? x : x + 1;
  int n = y == 0 ? y : y - 1, s = y == ny - 1 ? y : y + 1;
  for (int z = 0; z < nz; z++) {
    int b = z == 0 ? z : z - 1, a = z == nz - 1 ? z : z + 1;
    int plane = nx * ny * z;
    out[plane + y * nx + x] = cc * t[plane + y * nx + x]
        + cx * (t[plane + y * nx + w] + t[plane + y * nx + e])
        + cy * (t[plane + n * nx + x] + t[plane + s * nx + x])
        + cz * (t[nx * ny * b + y * nx + x] + t[nx * ny * a + y * nx + x])
        + cp * pw[plane + y * nx + x] + cz * amb;
  }
}

// several heat steps per launch on a shared tile (12 x 12 points written per 16 x 16 block),
// every step reading its neighbours clamped to the grid
extern "C" __global__ void heat_steps(int steps, const float* pw, const float* src, float* dst,
                                      int nx, int ny, float cc, float cn, float cp) {
  __shared__ float a[16][16];
  __shared__ float b[16][16];
  int tx = threadIdx.x, ty = threadIdx.y;
  int x0 = blockIdx.x * 12 - 2, y0 = blockIdx.y * 12 - 2;
  int gx = x0 + tx, gy = y0 + ty;
  int cx = gx < 0 ? 0 : (gx > nx - 1 ? nx - 1 : gx);
  int cy = gy < 0 ? 0 : (gy > ny - 1 ? ny - 1 : gy);
  a[ty][tx] = src[cy * nx + cx];
  float p = pw[cy * nx + cx];
  __syncthreads();
  for (int s = 1; s <= steps; s++) {
    if (tx >= s && tx <= 15 - s && ty >= s && ty <= 15 - s) {
      int w = (cx == 0 ? 0 : cx - 1) - x0, e = (cx == nx - 1 ? cx : cx + 1) - x0;
      int n = (cy == 0 ? 0 : cy - 1) - y0, so = (cy == ny - 1 ? cy : cy + 1) - y0;
      int mx = cx - x0, my = cy - y0;
      b[ty][tx] = cc * a[my][mx] + cn * (a[my][w] + a[my][e] + a[n][mx] + a[so][mx]) + cp * p;
    }
    __syncthreads();
    a[ty][tx] = b[ty][tx];
    __syncthreads();
  }
  if (tx >= 2 && tx <= 13 && ty >= 2 && ty <= 13 && gx < nx && gy < ny)
    dst[gy * nx + gx] = a[ty][tx];
}
"""

N = 32
K = 1e-8  # iso2dfd's dt^2 / dx^2
VEL = 2.25e6  # iso2dfd's squared velocity, everywhere


def _wave() -> EmulatedTarget:
    case = Case("wave_vel", (("buf", "float32"),) * 3 + (("f32", K), ("i64", N), ("i64", N)),
                (N, N), (N // 16, N // 16, 1), (16, 16, 1), fixed={2: (VEL,) * (N * N)})
    return EmulatedTarget(case, SOURCE)


def test_a_product_of_fields_with_a_tiny_coefficient_is_lifted() -> None:
    t = _wave()
    got = lift_probe(t)  # type: ignore[arg-type]
    assert isinstance(got, Probed), got
    p = got.program
    assert p.kind(p.outputs[0]) == "bilinear" and p.field("p2").role == "coef"
    poly = ex.polynomial(p.outputs[0].expr)
    assert poly[(("p1", (0, 0, 0)), ("p2", (0, 0, 0)))] == pytest.approx(-4 * K, rel=1e-5)
    assert poly[(("p1", (0, 0, 1)), ("p2", (0, 0, 0)))] == pytest.approx(K, rel=1e-5)
    assert {(f.rule, f.width) for f in p.faces[2:]} == {("keep", 1)}
    # at the recorded magnitudes (a wave front in prev, vel 2.25e6) the program is the kernel
    rng = np.random.default_rng(3)
    nxt, prev = rng.uniform(-1, 1, (2, N, N)).astype(np.float32)
    vel = np.full((N, N), VEL, np.float32) * rng.uniform(0.5, 1, (N, N)).astype(np.float32)
    out = t.run({0: nxt.view(np.uint8).ravel(), 1: prev.view(np.uint8).ravel(),
                 2: vel.view(np.uint8).ravel()})[0].view(np.float32).reshape(N, N)
    want = apply(p, {"p0": nxt, "p1": prev, "p2": vel}).outputs["p0"]
    assert np.abs(out - want).max() < 1e-5 * np.abs(want).max()
    assert np.abs(want - (2 * prev - nxt)).max() > 1e-2  # the product term matters


def test_clamped_faces_on_a_grid_of_eight_layers() -> None:
    nx, ny, nz = 32, 16, 8
    case = Case("heat_clamped", (("buf", "float32"),) * 3 + (
        ("int", nx), ("int", ny), ("int", nz), ("f32", 0.1), ("f32", 0.05), ("f32", 0.02),
        ("f32", 0.66), ("f32", 0.3), ("f32", 80.0)), (nz, ny, nx), (1, 4, 1), (32, 4, 1))
    got = lift_probe(EmulatedTarget(case, SOURCE))  # type: ignore[arg-type]
    assert isinstance(got, Probed), got
    assert {f.rule for f in got.program.faces} == {"clamp"} and got.shape == (nx, ny, nz)
    assert len(ex.polynomial(got.program.outputs[0].expr)) == 9  # 7 taps, power, ambient


def _steps(steps: int) -> EmulatedTarget:
    n = 36
    case = Case("heat_steps", (("int", steps),) + (("buf", "float32"),) * 3 + (
        ("int", n), ("int", n), ("f32", 0.2), ("f32", 0.18), ("f32", 0.1)), (n, n),
        (3, 3, 1), (16, 16, 1))
    return EmulatedTarget(case, SOURCE)


@pytest.mark.slow  # the other refusals here are the quick ones
def test_several_steps_per_launch_are_refused_with_the_reason() -> None:
    got = lift_probe(_steps(2))  # type: ignore[arg-type]
    assert isinstance(got, NotLifted), got
    assert "p3 reads p2 as a stencil of reach 1 applied 2 times" in got.reason
    assert "2 time steps per launch" in got.reason
    one = lift_probe(_steps(1))  # type: ignore[arg-type]
    assert isinstance(one, Probed), one
    assert {f.rule for f in one.program.faces[2:]} == {"clamp"}


def test_a_term_seen_only_at_other_magnitudes_is_refused_by_the_check() -> None:
    n = 24

    def k(b: dict[int, np.ndarray]) -> None:  # a product that vanishes for large coefficients
        u, c = b[0].reshape(1, n, n), b[1].reshape(1, n, n)
        lap = sum(shifted(u, 0, dy, dx, "wrap") for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[2][:] = (2 * u + np.where(np.abs(c) < 4, c * (lap - 4 * u), 0)).reshape(-1)
    t = target(k, {0: ("float32", n * n), 1: ("float32", n * n), 2: ("float32", n * n)},
               (n,), "float32")
    t.prologue[1] = np.full(n * n, 3e6, np.float32).view(np.uint8)  # recorded: large
    got = lift_probe(t)  # type: ignore[arg-type]
    assert isinstance(got, NotLifted), got
    assert "away from the faces, on fresh inputs in [-1, 1)" in got.reason
    assert "misses part of what the kernel computes" in got.reason


def test_a_first_step_over_zero_fields_says_to_record_a_later_launch() -> None:
    zeros = (0.0,) * (N * N)
    case = Case("wave_vel", (("buf", "float32"),) * 3 + (("f32", K), ("i64", N), ("i64", N)),
                (N, N), (N // 16, N // 16, 1), (16, 16, 1), fixed={0: zeros, 1: zeros, 2: zeros})
    got = lift_probe(EmulatedTarget(case, SOURCE))  # type: ignore[arg-type]
    assert isinstance(got, NotLifted) and "kernforge record --skip N" in got.reason, got
