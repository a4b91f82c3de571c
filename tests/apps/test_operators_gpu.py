"""Stencil operators on CuPy arrays through the cuda backend (GPU): the dispatched operator of a
temporal cell against the oracle, and an operator for a spec with other coefficients.

On a GPU machine: ``pytest -m gpu tests/apps/test_operators_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.operators import apply_stencil
from kernforge.stencil.oracle import reference
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape, custom

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


def test_dispatched_operator_on_the_callers_arrays_matches_the_oracle() -> None:
    cell = Cell(STENCILS["star_1_t4"], Shape(64, 48, 40), Precision.FP32)
    x = np.random.default_rng(0).uniform(0, 1, cell.shape.array_shape).astype(np.float32)
    inp, out = cp.asarray(x), cp.asarray(x)  # out's boundary preset to the input's
    apply_stencil(cell, inp, out)
    ref = reference(cell, x)
    assert float(np.abs(cp.asnumpy(out) - ref).max() / np.abs(ref).max()) < 1e-5


def test_an_operator_for_other_coefficients_on_a_2d_grid() -> None:
    w = {(0, 0, 0): 0.6, (0, 1, 0): 0.1, (0, -1, 0): 0.1, (0, 0, 1): 0.15, (0, 0, -1): 0.05}
    x = np.random.default_rng(1).uniform(-1, 1, (96, 128))
    inp, out = cp.asarray(x), cp.asarray(x)
    apply_stencil(custom("star", 1, w, dims=2), inp, out)
    want = x.copy()
    want[1:-1, 1:-1] = sum(c * x[1 + dy:95 + dy, 1 + dx:127 + dx] for (_, dy, dx), c in w.items())
    np.testing.assert_allclose(cp.asnumpy(out), want, atol=1e-14)
