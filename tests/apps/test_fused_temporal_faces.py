"""The temporal design with a step's boundary kernels folded (stencil/kernels/temporal_faces.py),
on the host emulator: the demo application's step (examples/heat3d_cupy.py's own CUDA source:
heat_stencil, then apply_boundary for axis 0, 1, 2) for T = 3, 5, 7 against T emulated unfused
steps from fresh random inputs, on grids that no tile divides and grids smaller than one tile;
rules whose order matters (constants on shared edges, z faces copied from 2 and 3 planes in)
against the float64 oracle, and the same rules in the other order; the refusals; nvcc."""

from __future__ import annotations

import dataclasses

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
from kernforge.stencil.spec import Cell

from .demo_step import DEMO_SLOTS, DemoStep, run_fused

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")

# the demo's heat step, alpha 0.1 (its probe finds these weights, tests/apps/test_fused_faces.py)
HEAT = {(0, 0, 0): 0.4, **{o: 0.1 for o in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0),
                                            (0, 0, 1), (0, 0, -1))}}
DEMO_FACES = ((fc.Face(0, 0, 0, 1.0), fc.Face(0, 1, 1)), (fc.Face(1, 0, 1), fc.Face(1, 1, 1)),
              (fc.Face(2, 0, 1), fc.Face(2, 1, 1)))
# the order matters: x=0 and y=0 constants share an edge (z faces copied 2 and 3 planes in);
# x=n-1's constant, then the z faces' constants over it, then copies within the planes
ORDERED = ((fc.Face(2, 0, 0, 0.25),), (fc.Face(1, 0, 0, 0.5), fc.Face(1, 1, 2)),
           (fc.Face(0, 0, 2), fc.Face(0, 1, 3)))
ORDERED_CONST_Z = ((fc.Face(2, 1, 0, 0.75),), (fc.Face(0, 0, 0, -1.0), fc.Face(0, 1, 0, 2.0)),
                   (fc.Face(1, 1, 1), fc.Face(1, 0, 1)), (fc.Face(2, 0, 3),))

# no z rule: the z faces keep their input under the in-plane rules
IN_PLANE = ((fc.Face(2, 1, 0, 0.5), fc.Face(2, 0, 2)), (fc.Face(1, 1, 0, 0.25),))


def _match(n: int, dtype: str = "float32") -> Recognized:
    return Recognized(0, 1, dtype, (n, n, n), "star", 1, 3, HEAT, "copy")


def _op(r: Recognized, steps: int, tx: int, ty: int, lz: int, groups: fc.Groups) -> Operator:
    spec = dataclasses.replace(r.spec, steps=steps, name=f"{r.spec.name}_t{steps}")
    return temporal.generate(Cell(spec, r.cell.shape, r.cell.precision), tx=tx, ty=ty, lz=lz,
                             faces=groups)


def _inputs(r: Recognized, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(r.dtype)
    return (rng.uniform(-1, 1, r.points).astype(dt), rng.uniform(2, 3, r.points).astype(dt))


@pytest.mark.parametrize(("steps", "n", "tile"), [
    (3, 13, (10, 9, 4)),    # 4x3 owned points, 4 planes: no tile divides 13
    pytest.param(5, 13, (12, 13, 3), marks=pytest.mark.slow),
    pytest.param(7, 13, (17, 16, 2),  # 3x2 owned points, 2 planes a chunk (the least z allows)
                 marks=pytest.mark.slow),
    pytest.param(7, 9, (16, 17, 0), marks=pytest.mark.slow),  # one chunk of all planes
    (3, 5, (32, 32, 64)),   # the grid inside one tile, lz past n
    (5, 6, (12, 12, 5)),    # two chunks: the last moved back onto the first
])
def test_the_demo_step_folds_into_the_temporal_design(steps: int, n: int,
                                                      tile: tuple[int, int, int]) -> None:
    step, r = DemoStep(n), _match(n)
    op = _op(r, steps, *tile, DEMO_FACES)
    assert op.params["faces"] == fc.describe(DEMO_FACES)
    x, y = _inputs(r, steps * n)
    want, _ = step.run(x, y, steps)
    got = run_fused(r, op, steps, x, y)
    g = got.reshape(n, n, n)
    assert np.array_equal(fc.apply(g, DEMO_FACES), g), "a copied face is not an exact copy"
    assert np.all(g[0] == np.float32(1.0)) and np.array_equal(g[0], want.reshape(n, n, n)[0])
    rtol, atol = fz.tolerance_steps(r, 3.0, steps)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    assert np.array_equal(run_fused(r, op, steps, x, y, shuffle=steps), got)  # any block order


@pytest.mark.parametrize("groups", [ORDERED, ORDERED_CONST_Z, IN_PLANE])
@pytest.mark.parametrize(("steps", "n", "tile"), [(3, 11, (12, 11, 4)), (5, 12, (16, 14, 5))])
def test_rules_apply_in_their_order(groups: fc.Groups, steps: int, n: int,
                                    tile: tuple[int, int, int]) -> None:
    """Against the float64 oracle of the step (stencil, then the rules in order); the same
    rules in the other order give another grid, which the fused one is not."""
    r = _match(n, "float64")
    x, y = _inputs(r, n)
    got = run_fused(r, _op(r, steps, *tile, groups), steps, x, y)
    g = got.reshape(n, n, n)
    assert np.array_equal(fc.apply(g, groups), g), "a face is not its rule's exact value"
    rtol, atol = fz.tolerance_steps(r, 3.0, steps)
    np.testing.assert_allclose(got, fz.steps_model(r, x, y, steps, groups), rtol=rtol,
                               atol=atol)
    swapped = fz.steps_model(r, x, y, steps, tuple(reversed(groups)))
    assert not np.allclose(got, swapped, rtol=rtol, atol=atol)


def test_the_candidates_offer_the_temporal_design_with_faces() -> None:
    r = _match(256)
    got = fz.candidates(r, (3, 5, 7), faces=DEMO_FACES)
    temporal_t = sorted({s for s, op in got if op.design == "temporal"})
    assert temporal_t == [3, 5, 7]
    assert {op.design for _, op in got} == {"temporal", "overlap"}
    assert all(op.params["faces"] == fc.describe(DEMO_FACES) for _, op in got)
    assert all(op.launches[0].shared_bytes <= 48 * 1024 for _, op in got)
    first = next(op for s, op in got if op.design == "temporal" and "pipe" not in op.params)
    ad = fz.fused_adapter(first, r, DEMO_SLOTS, 24, 3)
    assert "kf_boundary" not in ad.source  # the kernel writes every point, faces included
    assert first.params["minb"] == 2 and "__launch_bounds__(1024, 2)" in ad.source


def test_what_the_temporal_design_refuses() -> None:
    r = _match(32)
    cell = Cell(dataclasses.replace(r.spec, steps=3, name="t3"), r.cell.shape, r.cell.precision)
    for knobs in ({"fs": 1}, {"pipe": 1, "fs": 1}):
        with pytest.raises(DoesNotFit, match="all steps in one launch"):
            temporal.generate(cell, **knobs, faces=DEMO_FACES)
    with pytest.raises(DoesNotFit, match="holds the 2 planes"):
        _op(r, 3, 32, 32, 8, ((fc.Face(0, 0, 3),),))
    with pytest.raises(DoesNotFit, match="own more than 4 points along x"):
        _op(r, 3, 10, 32, 8, ((fc.Face(2, 1, 4),),))
    with pytest.raises(DoesNotFit, match="own more than 2 points along z"):
        _op(r, 3, 32, 32, 2, ((fc.Face(0, 1, 2),),))
    with pytest.raises(DoesNotFit, match="does not reach|copies from"):
        _op(r, 3, 32, 32, 8, ((fc.Face(1, 0, 16),),))


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
@pytest.mark.parametrize("steps", [pytest.param(t, marks=pytest.mark.slow) for t in (3, 5)] + [7])
def test_the_temporal_demo_adapter_compiles_for_sm90(steps: int) -> None:
    r = _match(256)
    s, op = next((s, op) for s, op in fz.candidates(r, (steps,), faces=DEMO_FACES)
                 if op.design == "temporal" and "pipe" not in op.params)
    ad = fz.fused_adapter(op, r, DEMO_SLOTS, 24, s)
    assert compile_cubin(ad.source, "sm_90").startswith(b"\x7fELF"), op.key
