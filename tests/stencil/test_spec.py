"""Stencil specs, shapes, precisions and cells: the invariants the oracle and kernels rely on."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.core import ConfigError
from kernforge.stencil.spec import (
    PRECISIONS,
    SHAPES,
    STENCILS,
    Cell,
    Precision,
    Shape,
    matrix,
    stencil_by_name,
)

POINTS = {"star_1": 7, "star_2": 13, "box_1": 27, "box_2": 125, "varcoeff_star_1": 7,
          "star_1_t4": 7}


@pytest.mark.parametrize("name", sorted(STENCILS))
def test_offsets_and_weights(name):
    s = STENCILS[name]
    assert s.points == len(s.offsets) == POINTS[name]
    assert len(set(s.offsets)) == s.points
    assert s.offsets[0] == (0, 0, 0)  # center first
    assert all(max(abs(o) for o in off) <= s.radius for off in s.offsets)
    if s.kind != "box":  # star and varcoeff: the axes only
        assert all(sum(1 for o in off if o) <= 1 for off in s.offsets)
    w = s.weights
    assert w.dtype == np.float64 and w.shape == (s.points,)
    assert np.sum(w) == pytest.approx(1.0, abs=1e-15)
    assert (w > 0).all()
    assert len(set(w.tolist())) == s.points  # distinct: no symmetry to exploit
    assert len(set(np.float32(w).tolist())) == s.points  # still distinct in fp32


def test_temporal_and_varcoeff_flags():
    assert STENCILS["star_1_t4"].steps == 4 and STENCILS["star_1_t4"].temporal
    assert not STENCILS["star_1"].temporal
    assert STENCILS["varcoeff_star_1"].inputs == 2 and STENCILS["star_1"].inputs == 1
    assert STENCILS["star_1_t4"].weights.tolist() == STENCILS["star_1"].weights.tolist()


def test_precisions():
    assert [p.value for p in PRECISIONS] == ["fp16", "fp32", "fp64"]
    assert Precision.FP16.tolerance == 1e-2
    assert Precision.FP32.tolerance == Precision.FP64.tolerance == 1e-4
    assert [p.itemsize for p in PRECISIONS] == [2, 4, 8]
    assert Precision.FP16.acc_ctype == "float" and Precision.FP64.ctype == "double"


def test_shapes_and_layout():
    s = Shape.parse("2048x64x32")
    assert (s.nx, s.ny, s.nz) == (2048, 64, 32)
    assert s.array_shape == (32, 64, 2048)  # x contiguous, z slowest
    assert s.interior(2) == (28, 60, 2044)
    assert s.interior_points(2) == 28 * 60 * 2044
    assert Shape(512, 512, 512) in SHAPES
    for bad in ("512x512", "axbxc", "0x4x4"):
        with pytest.raises(ConfigError):
            Shape.parse(bad)


def test_cell_ids_bytes_and_updates():
    c = Cell.parse("star_1/256x256x256/fp32")
    assert c.id == "star_1/256x256x256/fp32" and Cell.parse(c.id) == c
    assert c.compulsory_bytes == (256 ** 3 + 254 ** 3) * 4
    v = Cell.parse("varcoeff_star_1/256x256x256/fp16")
    assert v.compulsory_bytes == (2 * 256 ** 3 + 254 ** 3) * 2
    t = Cell.parse("star_1_t4/256x256x256/fp64")
    assert t.updates == 4 * 254 ** 3
    assert t.compulsory_bytes == (256 ** 3 + 254 ** 3) * 8  # fused: one read, one write
    assert t.flops == t.updates * 14
    for bad in ("star_1/256x256x256", "nope/8x8x8/fp32", "star_1/8x8x8/fp8"):
        with pytest.raises(ConfigError):
            Cell.parse(bad)


def test_matrix_filters_and_errors():
    full = matrix()
    assert len(full) == len(STENCILS) * len(SHAPES) * len(PRECISIONS)
    assert len({c.id for c in full}) == len(full)
    some = matrix(["star_1", "box_2"], ["64x64x64"], ["fp32"])
    assert [c.id for c in some] == ["star_1/64x64x64/fp32", "box_2/64x64x64/fp32"]
    with pytest.raises(ConfigError):
        matrix(["box_2"], ["4x64x64"])  # no interior for radius 2
    with pytest.raises(ConfigError):
        stencil_by_name("star_3")
