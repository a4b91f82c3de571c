"""Operator matching's recognition, on numpy stand-ins for application kernels (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.probe import NotAStencil, Recognized, candidate_shapes, model, recognize

from .stencil_kernels import (
    generic,
    heat_periodic,
    heat_zeropad,
    jacobi_with_error,
    laplace_copy,
    shifted,
    target,
)

STAR2D = ((0, 1), (0, -1), (1, 0), (-1, 0))


def _ok(r: Recognized | NotAStencil) -> Recognized:
    assert isinstance(r, Recognized), r
    return r


def test_heat_zero_padded_2d_fp64() -> None:
    n = 24
    t = target(heat_zeropad(n, 0.1), {1: ("float64", n * n), 2: ("float64", n * n)}, (n,),
               "float64")
    r = _ok(recognize(t))
    assert (r.in_param, r.out_param, r.shape, r.dims, r.kind, r.radius, r.boundary) == \
        (1, 2, (n, n, 1), 2, "star", 1, "zeropad")
    assert r.weights[(0, 0, 0)] == pytest.approx(0.6)
    assert r.weights[(0, 1, 0)] == pytest.approx(0.1)
    assert r.cell.id.startswith("star_1_2d~") and r.cell.id.endswith(f"/{n}x{n}x1/fp64")
    assert t.runs < 12


def test_heat_periodic_2d_fp32_dtype_found_without_a_name() -> None:
    lx, ly = 32, 16
    t = target(heat_periodic(lx, ly), {0: ("float32", lx * ly), 1: ("float32", lx * ly)},
               (lx, ly))
    r = _ok(recognize(t))
    assert (r.dtype, r.shape, r.boundary, r.in_param, r.out_param) == \
        ("float32", (lx, ly, 1), "periodic", 1, 0)


def test_laplace_3d_copy_boundary_zero_centre() -> None:
    nx, ny, nz = 16, 12, 10
    n = nx * ny * nz
    t = target(laplace_copy(nx, ny, nz), {4: ("float32", n), 5: ("float32", n)},
               (nx, ny, nz, nx), "float32")
    r = _ok(recognize(t))
    assert (r.shape, r.dims, r.kind, r.boundary) == ((nx, ny, nz), 3, "star", "copy")
    assert (0, 0, 0) not in r.weights and len(r.weights) == 6
    assert r.spec.weights[0] == 0.0  # the centre's coefficient in the spec's order


def test_model_reproduces_the_kernel() -> None:
    n = 20
    t = target(heat_zeropad(n, 0.05), {1: ("float64", n * n), 2: ("float64", n * n)}, (n,),
               "float64")
    r = _ok(recognize(t))
    x = np.random.default_rng(3).uniform(-1, 1, n * n)
    got = t.run({1: x.view(np.uint8), 2: np.zeros(n * n).view(np.uint8)})[2].view(np.float64)
    np.testing.assert_allclose(model(r, x, np.zeros(n * n)).reshape(-1), got, atol=1e-14)


def test_keep_boundary_and_a_bigger_output_buffer() -> None:
    n = 16

    def k(b: dict[int, np.ndarray]) -> None:  # interior only; the buffer holds 40 more elements
        u = b[1][:n * n].reshape(1, n, n)
        s = 0.25 * sum(shifted(u, 0, dy, dx, "zero") for dy, dx in STAR2D)
        out = b[2][:n * n].reshape(1, n, n)
        out[:, 1:-1, 1:-1] = s[:, 1:-1, 1:-1]
    r = _ok(recognize(target(k, {1: ("float32", n * n), 2: ("float32", n * n + 40)}, (n, n))))
    assert (r.boundary, r.shape) == ("keep", (n, n, 1))


def test_box_radius_2_3d() -> None:
    nx = ny = nz = 12
    rng = np.random.default_rng(5)
    w = {(dz, dy, dx): float(rng.uniform(0.1, 1)) for dz in (-1, 0, 1) for dy in (-1, 0, 1)
         for dx in (-2, 0, 2)}

    def k(b: dict[int, np.ndarray]) -> None:
        u = b[0].reshape(nz, ny, nx)
        b[1][:] = sum(c * shifted(u, *o, "wrap") for o, c in w.items()).reshape(-1)
    r = _ok(recognize(target(k, {0: ("float64", nx * ny * nz), 1: ("float64", nx * ny * nz)},
                             (nx, ny, nz), "float64")))
    assert (r.kind, r.radius, r.boundary) == ("box", 2, "periodic")
    assert set(r.weights) == set(w)


@pytest.mark.parametrize(("body", "reason"), [
    (lambda u: u ** 2 + shifted(u, 0, 0, 1, "zero"), "not linear"),
    (lambda u: 0.5 * u + shifted(u, 0, 1, 0, "zero") + 1.0, "affine"),
    (lambda u: u * (1 + np.arange(u.shape[2]) / 8) + shifted(u, 0, 0, 1, "zero"),
     "variable coefficients"),
    (lambda u: np.where(np.pad(np.ones((1, 14, 14)), ((0, 0), (1, 1), (1, 1))) > 0,
                        u + 0.5 * shifted(u, 0, 1, 0, "zero"), 2 * u), "boundary follows no"),
    (lambda u: np.broadcast_to(u.sum(), u.shape), "not local"),
])
def test_kernels_that_are_not_stencils_are_refused(body: object, reason: str) -> None:
    n = 16
    t = target(generic(n, body), {1: ("float32", n * n), 2: ("float32", n * n)}, (n,),  # type: ignore[arg-type]
               "float32")
    r = recognize(t)
    assert isinstance(r, NotAStencil) and reason in r.reason, r


def test_in_kernel_time_loop_is_refused_at_the_boundary() -> None:
    n = 16

    def two_steps(u: np.ndarray) -> np.ndarray:
        for _ in range(2):
            u = 0.6 * u + 0.1 * sum(shifted(u, 0, dy, dx, "zero") for dy, dx in STAR2D)
        return u
    r = recognize(target(generic(n, two_steps), {1: ("float32", n * n), 2: ("float32", n * n)},
                         (n,), "float32"))
    assert isinstance(r, NotAStencil) and "boundary" in r.reason


def test_reduction_and_second_output_and_in_place_are_refused() -> None:
    n = 16
    r = recognize(target(jacobi_with_error(n), {0: ("float32", n * n), 1: ("float32", n * n),
                                                 2: ("float32", 1)}, (), "float32"))
    assert isinstance(r, NotAStencil) and "wrote 2 buffers" in r.reason

    def total(b: dict[int, np.ndarray]) -> None:
        b[1][0] = b[0].sum()
    r = recognize(target(total, {0: ("float32", 64), 1: ("float32", 1)}, (64,), "float32"))
    assert isinstance(r, NotAStencil) and "no grid shape" in r.reason

    def inplace(b: dict[int, np.ndarray]) -> None:
        b[0][1:-1] = 0.5 * b[0][1:-1]
    r = recognize(target(inplace, {0: ("float32", 64)}, (64,), "float32"))
    assert isinstance(r, NotAStencil) and "in-place" in r.reason

    def int_kernel(b: dict[int, np.ndarray]) -> None:
        b[1][:] = b[0] + 1
    r = recognize(target(int_kernel, {0: ("int32", 64), 1: ("int32", 64)}, (64,), "int32"))
    assert isinstance(r, NotAStencil) and "int32" in r.reason


def test_candidate_shapes_prefer_exact_products() -> None:
    shapes = candidate_shapes((64, 32, 8, 3), 64 * 32 * 8, 64 * 32 * 8)
    assert shapes[0] == (64, 32, 8)
    assert (64, 64, 64) in candidate_shapes((7,), 64 ** 3, 64 ** 3)
    assert candidate_shapes((), 1, 1) == []
    assert candidate_shapes((), 1000, 1000)[0] == (1000, 1, 1)  # before the cube root


def test_1d_stencil_is_told_apart_from_a_cube_and_refused() -> None:
    n = 1000

    def heat1d(b: dict[int, np.ndarray]) -> None:
        u, out = b[0], b[1]
        out[1:-1] = u[1:-1] + 0.1 * (u[:-2] - 2 * u[1:-1] + u[2:])
        out[0], out[-1] = u[0], u[-1]
    r = recognize(target(heat1d, {0: ("float64", n), 1: ("float64", n)}, (n,), "float64"))
    assert isinstance(r, NotAStencil) and "1D stencil" in r.reason and "copy" in r.reason
