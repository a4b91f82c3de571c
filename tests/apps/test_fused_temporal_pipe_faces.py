"""The pipelined temporal kernel (``pipe=1``) with a step's boundary kernels folded
(stencil/kernels/temporal_pipe_faces.py), on the host emulator: the demo application's step
(examples/heat3d_cupy.py's own CUDA source) for T = 3 and 5, fp32 and fp64, over register
blocking, planes in flight, the boundary-free body and the launch order, against T emulated
unfused steps; an odd grid no tile divides; rules whose order matters against the float64
oracle; the matrix's operators (no rules) unchanged; nvcc."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from kernforge.apps import fused as fz
from kernforge.apps.probe import Recognized
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.stencil import emulate as em
from kernforge.stencil import faces as fc
from kernforge.stencil.kernels import temporal
from kernforge.stencil.kernels.common import DoesNotFit
from kernforge.stencil.operator import Operator
from kernforge.stencil.spec import Cell, Precision, matrix

from .demo_step import DEMO_SLOTS, DemoStep, run_fused
from .test_fused_temporal_faces import (
    DEMO_FACES,
    HEAT,
    IN_PLANE,
    ORDERED,
    ORDERED_CONST_Z,
    _match,
)

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")


def _op(r: Recognized, steps: int, groups: fc.Groups, **knobs: int) -> Operator:
    spec = dataclasses.replace(r.spec, steps=steps, name=f"{r.spec.name}_t{steps}")
    return temporal.generate(Cell(spec, r.cell.shape, r.cell.precision), pipe=1, faces=groups,
                             **knobs)


def _inputs(r: Recognized, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(r.dtype)
    return (rng.uniform(-1, 1, r.points).astype(dt), rng.uniform(2, 3, r.points).astype(dt))


# (steps, dtype, n, knobs): tiles that leave a few owned points, grids no tile divides (odd n)
CASES = [
    (3, "float32", 13, {"tx": 16, "ty": 8, "lz": 5}),
    (3, "float32", 15, {"tx": 8, "ty": 8, "lz": 4, "cy": 2, "pf": 2, "fi": 1}),
    (3, "float64", 13, {"tx": 8, "ty": 8, "lz": 6, "cx": 1, "cy": 2, "zo": 1}),
    (5, "float32", 12, {"tx": 8, "ty": 16, "lz": 4, "cx": 2, "pf": 2, "fi": 1}),
    (5, "float64", 11, {"tx": 16, "ty": 8, "lz": 3, "cy": 2, "fi": 1, "zo": 1}),
    (3, "float32", 14, {"tx": 8, "ty": 4, "lz": 7, "cx": 2, "cy": 2, "pf": 3}),
    (3, "float32", 13, {"tx": 16, "ty": 8, "lz": 5, "cy": 2, "fi": 1, "gb": 1}),
    (5, "float64", 12, {"tx": 8, "ty": 16, "lz": 4, "cx": 2, "pf": 2, "gb": 1, "zo": 1}),
    pytest.param(7, "float32", 13, {"tx": 32, "ty": 8, "lz": 4, "cy": 2, "pf": 2, "fi": 1},
                 marks=pytest.mark.slow),  # 2 rows owned
]


@pytest.mark.parametrize(("steps", "dtype", "n", "knobs"), CASES)
def test_the_demo_step_folds_into_the_pipelined_kernel(steps: int, dtype: str, n: int,
                                                       knobs: dict[str, int]) -> None:
    step, r = DemoStep(n, dtype), _match(n, dtype)
    op = _op(r, steps, DEMO_FACES, **knobs)
    assert op.params["faces"] == fc.describe(DEMO_FACES) and op.params["pipe"] == 1
    x, y = _inputs(r, steps * n)
    want, _ = step.run(x, y, steps)
    got = run_fused(r, op, steps, x, y)
    g = got.reshape(n, n, n)
    assert np.array_equal(fc.apply(g, DEMO_FACES), g), "a copied face is not an exact copy"
    assert np.all(g[0] == g.dtype.type(1.0))
    rtol, atol = fz.tolerance_steps(r, 3.0, steps)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    assert np.array_equal(run_fused(r, op, steps, x, y, shuffle=steps), got)  # any block order


@pytest.mark.parametrize("groups", [ORDERED, ORDERED_CONST_Z, IN_PLANE])
@pytest.mark.parametrize(("steps", "n", "knobs"), [
    (3, 11, {"tx": 16, "ty": 8, "lz": 4, "cy": 2, "fi": 1}),
    (5, 12, {"tx": 8, "ty": 8, "lz": 5, "cx": 2, "cy": 2, "pf": 2, "zo": 1, "gb": 1})])
def test_rules_apply_in_their_order(groups: fc.Groups, steps: int, n: int,
                                    knobs: dict[str, int]) -> None:
    """Against the float64 oracle of the step (stencil, then the rules in order); the same
    rules in the other order give another grid, which the fused one is not."""
    r = _match(n, "float64")
    x, y = _inputs(r, n)
    got = run_fused(r, _op(r, steps, groups, **knobs), steps, x, y)
    g = got.reshape(n, n, n)
    assert np.array_equal(fc.apply(g, groups), g), "a face is not its rule's exact value"
    rtol, atol = fz.tolerance_steps(r, 3.0, steps)
    np.testing.assert_allclose(got, fz.steps_model(r, x, y, steps, groups), rtol=rtol,
                               atol=atol)
    swapped = fz.steps_model(r, x, y, steps, tuple(reversed(groups)))
    assert not np.allclose(got, swapped, rtol=rtol, atol=atol)


@pytest.mark.parametrize(("dtype", "steps"), [("float32", (3, 5, 7)), ("float64", (3, 5))])
def test_the_candidates_offer_the_pipelined_kernel_first(dtype: str, steps: tuple[int, ...]
                                                         ) -> None:
    r = _match(256, dtype)
    got = fz.candidates(r, steps, faces=DEMO_FACES)
    for t in steps:
        ops = [op for s, op in got if s == t]
        assert ops[0].design == "temporal" and ops[0].params["pipe"] == 1, ops[0].key
    assert any(op.design == "temporal" and "pipe" not in op.params for _, op in got)
    pipe = [(s, op) for s, op in got if op.params.get("pipe") == 1]
    assert all(op.launches[0].shared_bytes <= 48 * 1024 for _, op in pipe)
    assert any(op.params.get("gb") == 1 for _, op in pipe)
    for s, op in pipe:  # every point written: no ring pass in the adapter
        assert "kf_boundary" not in fz.fused_adapter(op, r, DEMO_SLOTS, 24, s).source


def test_what_the_pipelined_kernel_refuses_with_rules() -> None:
    r = _match(32)
    with pytest.raises(DoesNotFit, match="all steps in one launch"):
        _op(r, 3, DEMO_FACES, tx=16, ty=8, lz=8, fs=1)
    with pytest.raises(DoesNotFit, match="own more than 4 points along x"):
        _op(r, 3, ((fc.Face(2, 1, 4),),), tx=8, ty=16, lz=8)  # 8 - 6 = 2 columns owned
    with pytest.raises(DoesNotFit, match="holds the 2 planes"):
        _op(r, 3, ((fc.Face(0, 0, 3),),), tx=16, ty=16, lz=8)
    with pytest.raises(DoesNotFit, match="gb"):
        _op(r, 3, (), tx=16, ty=16, lz=8, gb=1)
    spec = dataclasses.replace(r.spec, steps=3, name="t3")
    with pytest.raises(DoesNotFit, match="fp32 and fp64"):
        temporal.generate(Cell(spec, r.cell.shape, Precision.FP16), tx=16, ty=16, lz=8, pipe=1,
                          faces=DEMO_FACES)


@pytest.mark.slow  # nvcc for sm_90: 10 s
@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
@pytest.mark.parametrize(("dtype", "steps"), [("float32", 3), ("float64", 5)])
def test_the_pipelined_demo_adapter_compiles_for_sm90(dtype: str, steps: int) -> None:
    r = _match(256, dtype)
    for s, op in fz.candidates(r, (steps,), faces=DEMO_FACES):
        if op.params.get("pipe") == 1:
            ad = fz.fused_adapter(op, r, DEMO_SLOTS, 24, s)
            assert compile_cubin(ad.source, "sm_90").startswith(b"\x7fELF"), op.key


# the matrix's temporal operators (no rules): sha256 of source + launches, generated before the
# rules came to the pipelined kernel; a change here changes a measured operator
UNCHANGED = [
    ("star_1_t4/256x256x256/fp32", {"tx": 64, "ty": 16, "lz": 128, "pipe": 1, "cy": 2, "zo": 1},
     "9209cdda86c859d7"),
    ("star_1_t4/256x256x256/fp32", {"tx": 32, "ty": 16, "lz": 64, "pipe": 1, "fi": 1, "pf": 2},
     "972afee31c3a9845"),
    ("star_1_t4/512x512x512/fp32",
     {"tx": 8, "ty": 8, "lz": 5, "pipe": 1, "cx": 2, "cy": 2, "pf": 4, "fi": 1},
     "10d568ad0ef24a9c"),
    ("star_1_t4/256x256x256/fp64", {"tx": 16, "ty": 8, "lz": 6, "pipe": 1, "cy": 2, "fs": 2},
     "54cc5478a9e1b56a"),
    ("star_1_t4/1024x1024x32/fp64",
     {"tx": 32, "ty": 16, "lz": 64, "pipe": 1, "cx": 2, "fi": 1, "zo": 1},
     "8e7af4dd4e990235"),
    ("star_1_t4/256x256x256/fp16",
     {"tx": 32, "ty": 16, "lz": 64, "pipe": 1, "cx": 2, "pf": 2, "fi": 1, "h2": 1},
     "d27587957932f43e"),
    ("star_1_t4/1024x1024x1024/fp16",
     {"tx": 32, "ty": 32, "lz": 64, "pipe": 1, "cx": 4, "pf": 2, "fs": 2, "fi": 1, "minb": 2,
      "h2": 1},
     "0d3746b415260858"),
    ("star_1_t4/256x256x256/fp32", {"tx": 32, "ty": 32, "lz": 64},
     "205e78de8f452240"),
]


@pytest.mark.parametrize(("cid", "knobs", "digest"), UNCHANGED)
def test_operators_without_rules_are_unchanged(cid: str, knobs: dict[str, int],
                                               digest: str) -> None:
    cell = next(c for c in matrix() if c.id == cid)
    op = temporal.generate(cell, **knobs)
    assert hashlib.sha256((op.source + repr(op.launches)).encode()).hexdigest()[:16] == digest


@pytest.mark.parametrize("knobs", [{"tx": 8, "ty": 8, "lz": 4, "cx": 2, "cy": 2, "fi": 1},
                                   {"tx": 16, "ty": 8, "lz": 5, "pf": 2, "gb": 1, "zo": 1}])
def test_a_grid_of_three_extents(knobs: dict[str, int]) -> None:
    """nx, ny, nz all different (nz odd, none a multiple of the tile): the demo's rules
    against the float64 oracle."""
    r = Recognized(0, 1, "float64", (18, 13, 11), "star", 1, 3, HEAT, "copy")
    x, y = _inputs(r, 5)
    op = _op(r, 3, DEMO_FACES, **knobs)
    ad = fz.fused_adapter(op, r, DEMO_SLOTS, 24, 3)
    mod = em.compile_source(ad.source, [ad.entry])
    xi, yo = x.copy(), y.copy()
    mod.launch(ad.entry, [xi, yo, np.array(0.1), np.array(18, np.int32)], ad.grid, ad.block,
               ad.shared_bytes)
    g = yo.reshape(11, 13, 18)
    assert np.array_equal(fc.apply(g, DEMO_FACES), g)
    rtol, atol = fz.tolerance_steps(r, 3.0, 3)
    np.testing.assert_allclose(yo, fz.steps_model(r, x, y, 3, DEMO_FACES), rtol=rtol, atol=atol)
