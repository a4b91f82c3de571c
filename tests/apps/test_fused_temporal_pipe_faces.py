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
from kernforge.stencil.spec import Cell, matrix

from .demo_step import DEMO_SLOTS, DemoStep, run_fused
from .test_fused_temporal_faces import DEMO_FACES, IN_PLANE, ORDERED, ORDERED_CONST_Z, _match

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
    (5, 12, {"tx": 8, "ty": 8, "lz": 5, "cx": 2, "cy": 2, "pf": 2, "zo": 1})])
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
