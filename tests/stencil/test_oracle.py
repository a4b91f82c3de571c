"""The float64 oracle against explicit loops, and its checker (the harness's, the oracle plugged
in by the forge) against planted errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernforge.core import ConfigError
from kernforge.forge.oracle_check import check, check_sampled
from kernforge.stencil import oracle
from kernforge.stencil.oracle import random_fields, reference
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape, StencilSpec, matrix


def loops(spec: StencilSpec, a: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """An independent reference: explicit Python loops, one point at a time."""
    r = spec.radius
    nz, ny, nx = a.shape
    cur = [[[float(a[z, y, x]) for x in range(nx)] for y in range(ny)] for z in range(nz)]
    terms = list(zip(spec.offsets, spec.weights.tolist(), strict=True))
    for _ in range(spec.steps):
        nxt = [[row[:] for row in plane] for plane in cur]
        for z, y, x in itertools.product(range(r, nz - r), range(r, ny - r), range(r, nx - r)):
            vals = [w * cur[z + dz][y + dy][x + dx] for (dz, dy, dx), w in terms]
            if spec.kind == "varcoeff":
                assert c is not None
                nxt[z][y][x] = vals[0] + float(c[z, y, x]) * sum(vals[1:])
            else:
                nxt[z][y][x] = sum(vals)
        cur = nxt
    return np.array(cur)


def tiny(name: str, shape: str = "7x6x5", prec: str = "fp64") -> Cell:
    return Cell(STENCILS[name], Shape.parse(shape), Precision(prec))


def exact_output(cell: Cell, fields: dict) -> np.ndarray:
    """What a correct operator writes: the oracle rounded to storage, boundary = input."""
    return reference(cell, fields["in"], fields.get("coef")).astype(cell.precision.dtype)


@pytest.mark.parametrize("name", sorted(STENCILS))
def test_reference_matches_loops(name):
    spec = STENCILS[name]
    shape = "9x8x7" if spec.radius == 2 else "7x6x5"
    cell = tiny(name, shape)
    f = random_fields(cell, seed=3)
    ref = reference(cell, f["in"], f.get("coef"))
    np.testing.assert_allclose(ref, loops(spec, f["in"], f.get("coef")), rtol=1e-13, atol=0)
    r = spec.radius
    interior = np.zeros(ref.shape, bool)
    interior[r:-r, r:-r, r:-r] = True
    assert (ref[~interior] == f["in"][~interior]).all()  # boundary = input, exactly
    assert ref.dtype == np.float64


def test_reference_accepts_a_spec_and_is_scale_invariant_in_inputs():
    a = np.random.default_rng(0).random((6, 7, 8))
    ref = reference(STENCILS["box_1"], a)
    np.testing.assert_allclose(reference(STENCILS["box_1"], 3 * a), 3 * ref, rtol=1e-14)
    ones = reference(STENCILS["star_2"], np.ones((9, 9, 9)))
    np.testing.assert_allclose(ones, 1.0, rtol=1e-14)  # weights sum to 1


def test_random_fields():
    cell = tiny("varcoeff_star_1", "16x12x8", "fp16")
    f = random_fields(cell, seed=5)
    assert sorted(f) == ["coef", "in"]
    assert f["in"].dtype == np.float16 and f["in"].shape == (8, 12, 16)
    assert 0.0 <= f["in"].min() and f["in"].max() <= 1.0
    again = random_fields(cell, seed=5)
    assert (again["in"] == f["in"]).all() and (again["coef"] == f["coef"]).all()
    assert not (random_fields(cell, seed=6)["in"] == f["in"]).all()
    assert sorted(random_fields(tiny("star_1"), 1)) == ["in"]
    f64 = random_fields(tiny("star_1", "8x8x8", "fp64"), 1)["in"]
    assert f64.dtype == np.float64 and f64.max() < 1.0


@pytest.mark.parametrize("cell", matrix(shapes=["20x17x13"]), ids=lambda c: c.id)
def test_sampled_agrees_with_full_on_exact_output(cell):
    f = random_fields(cell, seed=11)
    out = exact_output(cell, f)
    full = check(cell, f, out, seed=11, full=True)
    sampled = check(cell, f, out, seed=11, full=False, points=300)
    assert full.ok and sampled.ok, (full, sampled)
    assert sampled.detail["mode"] == "sampled" and full.detail["mode"] == "full"
    assert sampled.detail["max_abs"] <= full.detail["max_abs"]  # a subset of the points
    assert sampled.seed == 11 and sampled.checked_points > 300
    assert sampled.detail["boundary_touched"] == 0
    if cell.precision.value == "fp64":
        assert full.error < 1e-15


def test_sampled_points_equal_full_reference_near_faces():
    """The gathered cubes (clipped at the faces) give exactly the full oracle's values."""
    cell = tiny("star_1_t4", "12x11x10")
    f = random_fields(cell, seed=2)
    ref = reference(cell, f["in"])
    pts = oracle.sample_points(cell, 500, seed=2)
    out = ref.copy()
    got, want = oracle._points(cell, f, out, "full", pts)
    np.testing.assert_array_equal(got, ref[pts[:, 0], pts[:, 1], pts[:, 2]])
    np.testing.assert_allclose(want, got, rtol=1e-15, atol=0)
    for axis in range(3):
        for pos in oracle.slab_positions(cell)["zyx"[axis]]:
            o, r = oracle._slab(cell, f, out, "full", axis, pos)
            np.testing.assert_allclose(r, o, rtol=1e-15, atol=0)


def test_slab_positions():
    cell = tiny("star_2", "40x30x20")
    assert oracle.slab_positions(cell) == {"z": (2, 10, 17), "y": (2, 15, 27),
                                           "x": (2, 20, 37)}


@pytest.fixture
def case():
    cell = tiny("star_1", "24x20x16", "fp32")
    f = random_fields(cell, seed=7)
    return cell, f, exact_output(cell, f)


def test_sampled_catches_a_wrong_point_on_a_face(case):
    cell, f, out = case
    out[1, 9, 13] += 0.01  # on the first interior z-plane; no random points checked
    res = check_sampled(cell, f, out, seed=7, points=0)
    assert not res.ok and res.error > cell.precision.tolerance
    assert res.detail["parts"]["z=1"] > 0 and res.detail["parts"]["z=8"] < 1e-6
    assert res.where == "z=1[0, 8, 12]"  # the part, then the index in its interior plane


def test_sampled_catches_a_touched_boundary(case):
    cell, f, out = case
    out2 = out.copy()
    out[0, 5, 5] = np.float32(out[0, 5, 5] + 1e-7)  # one ulp-ish: bits differ
    res = check_sampled(cell, f, out, seed=7, points=10)
    assert not res.ok and res.detail["boundary_touched"] == 1 and res.error < 1e-6
    assert res.where == "boundary_touched[0, 5, 5]"  # the z- face
    out2[:, :, -1] = 0  # the last x face
    assert check(cell, f, out2, full=True).detail["boundary_touched"] == 16 * 20


def test_sampled_catches_a_wrong_tail_row(case):
    cell, f, out = case
    out[5, 18, 1:-1] = 0  # the last interior row along x of one z-plane (y = ny-1-r)
    res = check_sampled(cell, f, out, seed=7, points=0)
    assert not res.ok and res.detail["parts"]["y=18"] > 0.1
    out2 = case[2].copy()
    out2[1:-1, 1:-1, 22] = 0  # the x tail: last interior column
    assert not check_sampled(cell, f, out2, seed=7, points=0).ok


def test_random_points_catch_scattered_errors():
    cell = tiny("box_1", "30x30x30", "fp64")
    f = random_fields(cell, seed=1)
    out = exact_output(cell, f)
    inner = out[1:-1, 1:-1, 1:-1]
    inner[3:-3, 3:-3, 3:-3] *= 1.001  # away from every checked slab... except the middles
    res = check_sampled(cell, f, out, seed=1, points=200, slabs=False)
    assert not res.ok and res.detail["parts"]["points"] > 0


def test_nan_and_untouched_interior_fail(case):
    cell, f, out = case
    out[4, 4, 4] = np.nan
    res = check(cell, f, out, full=True)
    assert not res.ok and res.error == float("inf")
    assert res.to_json()["error"] is None  # strict JSON
    assert not check(cell, f, f["in"].copy(), full=True).ok  # out = in: nothing computed


def test_interior_only_output(case):
    cell, f, out = case
    inner = out[1:-1, 1:-1, 1:-1].copy()
    for full in (True, False):
        res = check(cell, f, inner, full=full, points=50)
        assert res.ok and res.detail["output"] == "interior"
        assert res.detail["boundary_touched"] is None
    bad = inner.copy()
    bad[-1, 3, 3] += 1
    assert not check(cell, f, bad, full=False, points=0).ok


def test_fp16_within_its_gate():
    cell = tiny("box_2", "16x16x16", "fp16")
    f = random_fields(cell, seed=4)
    res = check(cell, f, exact_output(cell, f), full=False, points=100)
    assert res.ok and 0 < res.error < 1e-2 and res.tolerance == 1e-2


def test_bad_inputs(case):
    cell, f, out = case
    with pytest.raises(ConfigError):
        reference(cell, f["in"][1:])  # not the cell's shape
    with pytest.raises(ConfigError):
        reference(STENCILS["star_1"], np.zeros((4, 4)))  # not 3-d
    with pytest.raises(ConfigError):
        reference(STENCILS["star_2"], np.zeros((4, 9, 9)))  # no interior
    with pytest.raises(ConfigError):
        reference(STENCILS["star_1"], f["in"], coef=f["in"])  # coef for a star
    with pytest.raises(ConfigError):
        reference(STENCILS["varcoeff_star_1"], f["in"])  # missing coef
    with pytest.raises(ConfigError):
        reference(STENCILS["varcoeff_star_1"], f["in"], coef=np.zeros((3, 3, 3)))
    with pytest.raises(ConfigError):
        check(cell, f, out[1:], full=False)  # neither grid nor interior
    with pytest.raises(ConfigError):
        check(cell, f, out.astype(np.float64), full=False)  # dtype differs
    with pytest.raises(ConfigError):
        check_sampled(cell, f, out, points=-1)
    with pytest.raises(ConfigError):
        check(cell, {}, out)
