"""lift_source on kernels of our own writing modelled on HeCBench refusal classes fixed by
where a thread's point lies: burger's interior threads (``i = gy + 1``), hypterm's
``max(blockIdx * blockDim, 0) + threadIdx`` indices and guards joined by bitwise ``&``,
copy and clearing kernels (burger's update, heat's zero); each checked against the kernel on
the host emulator. And what stays refused: a point before the grid, an origin given by
parameters, a guard that bounds an axis by another axis' extent (hypterm's ``j <= N - 5`` on a
grid of ``M`` rows), a conditional read whose condition holds only while one size exceeds
another."""

from __future__ import annotations

from kernforge.apps.lift_regions import Lifted, NotLifted
from kernforge.apps.lift_source import lift_source
from kernforge.stencil.program import FaceRule
from kernforge.stencil.program import expr as ex

from .lift_kernels import CASES, REFUSED, SOURCE
from .test_lift_source import check_case


def _lift(entry: str, source: str = SOURCE) -> Lifted:
    r = lift_source(source, entry)
    assert isinstance(r, Lifted), r
    return r


def test_interior_threads_one_point_in_from_the_edges() -> None:
    r = _lift("burgers")
    p = r.program
    assert p.dims == 2 and p.precision == "fp64" and r.extents == ("nx", "ny")
    assert [o.field for o in p.outputs] == ["un", "vn"]
    assert all(p.kind(o) == "bilinear" for o in p.outputs)
    assert p.faces == (FaceRule("keep", 0),) * 2 + (FaceRule("keep", 1),) * 4
    assert "dt * v[0,0,0] * (u[0,0,0] - u[0,-1,0])" in p.describe()
    check_case("burgers", r)
    check_case("burgers", r, seed=3)


def test_max_of_block_offsets_and_bitwise_guards() -> None:
    r = _lift("hyper")
    p = r.program
    assert p.dims == 3 and r.extents == ("nx", "ny", "nz")
    assert [o.field for o in p.outputs] == ["f0", "f1"]
    assert p.kind(p.output("f1")) == "bilinear" and ex.reach(p.output("f0").expr)["x+"] == 2
    assert p.rule("x-") == FaceRule("keep", 2) and p.rule("z+") == FaceRule("keep", 0)
    check_case("hyper", r)


def test_copy_and_clearing_kernels_are_programs() -> None:
    r = _lift("copy2")
    p = r.program
    assert {o.field: o.expr for o in p.outputs} == {"u": ex.Tap("un", (0, 0, 0)),
                                                   "v": ex.Tap("vn", (0, 0, 0))}
    assert r.fields == {"u": 0, "v": 1, "un": 2, "vn": 3}
    check_case("copy2", r)
    src = ("__global__ void zero(const unsigned int n, double *u) {"
           " int idx = blockDim.x * blockIdx.x + threadIdx.x; if (idx < n * n) u[idx] = 0.0; }")
    z = _lift("zero", src)
    assert z.program.outputs[0].expr == ex.Const(0.0) and z.extents == ("n*n",)


def test_max_that_depends_on_the_sign_of_a_parameter_stays_a_clamp_question() -> None:
    src = ("__global__ void k(const float* in, float* out, int n, int s) {"
           " int i = max((int)(blockIdx.x * blockDim.x) - s, 0) + threadIdx.x;"
           " if (i < n) out[i] = in[i]; }")
    r = lift_source(src, "k")
    assert isinstance(r, NotLifted) and "conditional index" in r.reason, r


def test_points_the_model_cannot_place_are_refused_with_the_reason() -> None:
    for entry, words in (("below", "minus a constant along gx"),
                         ("origin", "offset by lo, no fixed number of points"),
                         ("crossed", "bounds an axis by another axis' extent"),
                         ("strided", "not the bound check of its offset")):
        r = lift_source(REFUSED, entry)
        assert isinstance(r, NotLifted) and words in r.reason, (entry, r)


def test_cubic_terms_of_two_outputs_in_a_grid_stride_loop() -> None:
    r = _lift("gray")
    p = r.program
    assert [p.kind(o) for o in p.outputs] == ["polynomial", "polynomial"]
    assert "dry = fx[0,0,0] * fy[0,0,0] * fy[0,0,0] - (c1 + c2) * fy[0,0,0]" in p.describe()
    check_case("gray", r)  # the grid of 2 blocks of 8 covers 45 points in 3 turns


def test_the_cases_are_in_the_shared_table() -> None:
    assert {"burgers", "hyper", "gray", "copy2"} <= set(CASES)  # probed, operators too
