"""The y-marching design for planar stencils: run by the host emulator against a numpy
reference (star and box, radius 1 and 2, fp32 and fp64, grids whose rows and interiors are not
multiples of the block, the vector or the chunk), where it applies, and nvcc for sm_90."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import numpy as np
import pytest

from kernforge.stencil import emulate as em
from kernforge.stencil import matrix as mx
from kernforge.stencil.kernels import ymarch
from kernforge.stencil.kernels.design import DoesNotFit
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape, StencilSpec, custom


def planar(kind: str, radius: int, seed: int = 0, zeros: bool = False) -> StencilSpec:
    """A planar spec with distinct weights (``zeros``: every other one 0, as a recognized
    kernel's spec has where the kernel reads nothing)."""
    base = custom(kind, radius, {}, dims=2)
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.05, 1.0, len(base.offsets))
    if zeros:
        w[1::2] = 0.0
    return custom(kind, radius, dict(zip(base.offsets, (float(v) for v in w), strict=True)),
                  dims=2)


def reference(spec: StencilSpec, inp: np.ndarray) -> np.ndarray:
    """Every z-plane's interior (radius from the y and x faces) by the stencil in float64,
    the rest the input."""
    g = inp.astype(np.float64)
    r = spec.radius
    _, ny, nx = g.shape
    out = g.copy()
    acc = np.zeros_like(g[:, r:ny - r, r:nx - r])
    for w, (_, dy, dx) in zip(spec.weights, spec.offsets, strict=True):
        acc += w * g[:, r + dy:ny - r + dy, r + dx:nx - r + dx]
    out[:, r:ny - r, r:nx - r] = acc
    return out


def run(cell: Cell, params: dict[str, Any]) -> None:
    op = mx.build("ymarch", cell, params)
    assert op is not None, params
    rng = np.random.default_rng(3)
    inp = rng.uniform(-1, 1, cell.shape.array_shape).astype(cell.precision.dtype)
    arrays = {"in": inp, "out": inp.copy()}
    em.emulate(op, arrays)
    ref = reference(cell.stencil, inp)
    tol = 1e-12 if cell.precision is Precision.FP64 else 2e-6
    np.testing.assert_allclose(arrays["out"].astype(np.float64), ref, atol=tol, rtol=0)
    r = cell.radius
    ring = np.ones(inp.shape, bool)
    ring[:, r:-r, r:-r] = False
    np.testing.assert_array_equal(arrays["out"][ring], inp[ring])  # the boundary untouched


CASES = [  # (kind, radius, precision, NXxNYxNZ, params): tails in x, in y, in the chunks
    ("star", 1, "fp64", "40x29x1", {"tx": 8, "ty": 2, "vx": 2, "ly": 5, "pf": 2}),
    ("star", 1, "fp32", "40x29x2", {"tx": 4, "ty": 3, "vx": 4, "ly": 4, "pf": 4}),
    ("star", 2, "fp64", "37x26x1", {"tx": 8, "ty": 1, "vx": 1, "ly": 7, "pf": 1}),
    ("star", 2, "fp32", "48x19x1", {"tx": 4, "ty": 2, "vx": 8, "ly": 0, "pf": 2}),
    ("box", 1, "fp32", "36x23x1", {"tx": 4, "ty": 2, "vx": 4, "ly": 3, "pf": 2}),
    ("box", 1, "fp64", "42x17x2", {"tx": 8, "ty": 1, "vx": 2, "ly": 16, "pf": 4, "cw": 1}),
    ("box", 2, "fp64", "34x21x1", {"tx": 8, "ty": 2, "vx": 2, "ly": 4, "pf": 2, "minb": 2}),
    ("box", 2, "fp32", "45x22x1", {"tx": 16, "ty": 1, "vx": 1, "ly": 8, "pf": 1}),
]


@pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")
@pytest.mark.parametrize(("kind", "radius", "prec", "shape", "params"), CASES,
                         ids=[f"{c[0]}{c[1]}-{c[2]}-{c[3]}" for c in CASES])
def test_ymarch_matches_the_reference(kind: str, radius: int, prec: str, shape: str,
                                      params: dict[str, Any]) -> None:
    run(Cell(planar(kind, radius, seed=radius), Shape.parse(shape), Precision(prec)), params)


@pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")
def test_zero_weights_are_left_out_and_the_result_is_the_same() -> None:
    cell = Cell(planar("box", 1, zeros=True), Shape(24, 13, 1), Precision.FP64)
    op = mx.build("ymarch", cell, {"tx": 4, "ty": 2, "vx": 2, "ly": 4, "pf": 2})
    assert op is not None and op.source.count(" * q[") == 2 * 5  # 5 nonzero of 9, 2 lanes
    run(cell, {"tx": 4, "ty": 2, "vx": 2, "ly": 4, "pf": 2})


def test_ymarch_builds_planar_stencils_only() -> None:
    cube = Cell(STENCILS["star_1"], Shape(64, 32, 16), Precision.FP32)
    flat = Cell(planar("star", 1), Shape(64, 32, 1), Precision.FP32)
    assert "ymarch" not in mx.applicable(cube)
    assert mx.applicable(flat) == ["ymarch", "naive"]
    assert mx.build("ymarch", cube, mx.defaults("ymarch", cube)) is None
    with pytest.raises(DoesNotFit):
        ymarch.generate(cube)
    with pytest.raises(DoesNotFit):  # vectors that do not divide the row
        ymarch.generate(Cell(planar("star", 1), Shape(66, 32, 1), Precision.FP32), vx=4)


def test_the_chunk_and_the_launch_follow_the_grid() -> None:
    heat = Cell(planar("star", 1), Shape(4096, 4096, 1), Precision.FP64)
    op = mx.build("ymarch", heat, mx.defaults("ymarch", heat))
    assert op is not None and op.params["ly"] == 16 and op.params["vx"] == 2
    (gx, gy, gz), (bx, by, _) = op.launches[0].grid, op.launches[0].block
    assert gx * bx * 2 >= 4096 and gy * by * 16 >= 4094 and gz == 1
    assert gx * gy * bx * by >= ymarch.THREADS
    small = Cell(planar("star", 2), Shape(64, 7, 1), Precision.FP32)  # 3 interior rows
    op = mx.build("ymarch", small, {"ly": 32, "pf": 4})
    assert op is not None and op.params["ly"] == 3 and op.params["pf"] == 3
    keys = [mx.build("ymarch", heat, p).key for p in mx.presets("ymarch", heat)]  # type: ignore[union-attr]
    assert len(set(keys)) == len(keys) == 4


def test_every_knob_of_the_space_is_a_parameter_and_every_preset_builds() -> None:
    import inspect

    accepted = set(inspect.signature(ymarch.generate).parameters) - {"cell"}
    for prec in (Precision.FP32, Precision.FP64, Precision.FP16):
        cell = Cell(planar("box", 2), Shape(256, 128, 1), prec)
        assert set(ymarch.space(cell)) <= accepted
        assert all(mx.build("ymarch", cell, p) for p in mx.presets("ymarch", cell))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("prec", ["fp32", "fp64"])
def test_ymarch_compiles_for_sm90(prec: str, tmp_path: Any) -> None:
    cell = Cell(planar("box", 2), Shape(4096, 4096, 1), Precision(prec))
    for params in mx.presets("ymarch", cell):
        op = mx.build("ymarch", cell, params)
        assert op is not None
        src = tmp_path / "op.cu"
        src.write_text(op.source)
        done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "--std=c++17", "-o",
                               str(tmp_path / "op.cubin"), str(src)], capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
