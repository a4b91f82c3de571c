"""Stencil operators as the product's variants, and the API that runs them on device arrays
(the launches on CuPy arrays are in the gpu tests)."""

from __future__ import annotations

import numpy as np
import pytest

import kernforge
from kernforge.apps.operators import OperatorKernel, apply_stencil
from kernforge.core import ConfigError
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape, custom
from kernforge.stencil.variant import variants

CELL = Cell(STENCILS["star_1_t4"], Shape(64, 48, 40), Precision.FP32)


def test_an_operator_is_one_cuda_variant_per_launch_with_its_source_unchanged() -> None:
    op = mx.operator_for(CELL)
    vs = variants(op)
    assert len(vs) == len(op.launches)
    for lv, la in zip(vs, op.launches, strict=True):
        v = lv.variant
        assert v.source.code == op.source and v.source.entry == la.entry
        assert v.source.language == "cuda"
        assert (v.launch.grid, v.launch.block, v.launch.shared_mem) == \
            (la.grid, la.block, la.shared_bytes)
        assert dict(v.options.values)["extra_options"] == " ".join(op.options)
        assert lv.args == la.args and lv.carveout == la.carveout


def test_wrong_arrays_are_refused_before_anything_compiles() -> None:
    k = OperatorKernel.for_cell(CELL)
    good = np.zeros(CELL.shape.array_shape, np.float32)
    with pytest.raises(ConfigError, match="needs float32"):
        k(good, np.zeros((40, 48, 65), np.float32))
    with pytest.raises(ConfigError, match="needs float32"):
        k(good.astype(np.float64), good)
    with pytest.raises(ConfigError, match="C-contiguous"):
        k(good, np.zeros((40, 64, 48), np.float32).transpose(0, 2, 1))
    vc = Cell(STENCILS["varcoeff_star_1"], Shape(64, 48, 40), Precision.FP32)
    with pytest.raises(ConfigError, match="reads coef"):
        apply_stencil(vc, good, good.copy())
    w = {(0, 0, 0): 0.6, (0, 1, 0): 0.1, (0, -1, 0): 0.1, (0, 0, 1): 0.1, (0, 0, -1): 0.1}
    with pytest.raises(ConfigError, match="needs float64"):  # a spec: grid read from inp
        apply_stencil(custom("star", 1, w, dims=2), np.zeros((32, 32)), np.zeros((32, 33)))


def test_public_names() -> None:
    assert kernforge.apply_stencil is apply_stencil and kernforge.OperatorKernel is OperatorKernel
