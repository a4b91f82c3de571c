"""Lifting stencil programs by probing: the CUDA test kernels on the host emulator (each
class, and the same program as lifting their source finds), numpy stand-ins for the rest, and
the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.lift_regions import Lifted, NotLifted
from kernforge.apps.lift_source import lift_source
from kernforge.apps.probe import Recognized, recognize
from kernforge.stencil.program import StencilProgram
from kernforge.stencil.program import expr as ex

from .lift_kernels import CASES, CONSTANTS, SOURCE, EmulatedTarget, scalars
from .stencil_kernels import generic, heat_periodic, heat_zeropad, laplace_copy, shifted, target
from .test_lift_source import oracle_matches_kernel


def _probe(t: object) -> Probed:
    r = lift_probe(t)  # type: ignore[arg-type]
    assert isinstance(r, Probed), r
    return r


def _same(probed: Probed, lifted: Lifted, params: dict[int, float],
          tables: dict[str, list[float]]) -> None:
    """The probed program computes what the source says, field by field (names differ)."""
    ps, pl = probed.program, lifted.program
    size = int(np.prod(probed.shape))
    by_param = {(i, probed.offsets[n] // size): n for n, i in probed.fields.items()}
    rename = {n: by_param[(i, lifted.components.get(n, 0))] for n, i in lifted.fields.items()}

    def poly(e: ex.Expr, names: dict[str, str] | None = None, **kw: object) -> dict:
        out = {}
        for mono, c in ex.polynomial(e, **kw).items():  # type: ignore[arg-type]
            out[tuple(sorted(((names or {}).get(f, f), o) for f, o in mono))] = c
        return out
    for o in pl.outputs:
        want = poly(o.expr, rename, params=params, constants={**CONSTANTS, **tables})
        got = poly(ps.output(rename[o.field]).expr)
        assert set(got) == set(want), (o.field, got, want)
        rel = {"fp16": 1e-2, "fp32": 1e-5, "fp64": 1e-9}[pl.precision]  # the fit's noise
        for m, c in want.items():
            assert got[m] == pytest.approx(c, rel=rel, abs=rel * 1e-3), (o.field, m)
    assert ps.faces == pl.faces and ps.dims == pl.dims and ps.precision == pl.precision
    assert {rename[f.name]: f.role for f in pl.fields} == {f.name: f.role for f in ps.fields}
    assert [(r.op, r.accumulate, r.over) for r in ps.reductions] == \
        [(r.op, r.accumulate, r.over) for r in pl.reductions]


@pytest.mark.parametrize("entry", sorted(CASES))
def test_probing_finds_what_the_source_says(entry: str) -> None:
    case = CASES[entry]
    t = EmulatedTarget(case)
    probed = _probe(t)
    lifted = lift_source(SOURCE, entry)
    assert isinstance(lifted, Lifted), lifted
    tables = {n: list(case.fixed[p]) for n, p in lifted.tables.items()}
    _same(probed, lifted, scalars(case), tables)
    nx = case.shape[-1]
    assert probed.shape[0] == nx and np.prod(probed.shape) == np.prod(case.shape)
    assert StencilProgram.from_json(probed.program.to_json()) == probed.program
    oracle_matches_kernel(entry, probed.program, dict(probed.fields), dict(probed.reductions),
                          seed=5, offsets=dict(probed.offsets))
    assert t.runs < 60, t.runs


def test_agrees_with_recognition_on_one_input_stencils() -> None:
    n = 20
    for kernel, layout, ints, dt in [
        (heat_zeropad(n, 0.1), {1: ("float64", n * n), 2: ("float64", n * n)}, (n,), "float64"),
        (heat_periodic(24, 12), {0: ("float32", 288), 1: ("float32", 288)}, (24, 12), None),
        (laplace_copy(12, 11, 10), {4: ("float32", 1320), 5: ("float32", 1320)},
         (12, 11, 10, 12), "float32"),
    ]:
        rec = recognize(target(kernel, layout, ints, dt))
        got = _probe(target(kernel, layout, ints, dt))
        assert isinstance(rec, Recognized)
        (out,) = got.program.outputs
        poly = ex.polynomial(out.expr)
        assert {m[0][1]: c for m, c in poly.items()} == pytest.approx(dict(rec.weights))
        rule = {"zeropad": "zeropad", "periodic": "periodic", "copy": "copy"}[rec.boundary]
        assert got.program.rule("x-").rule == rule and got.shape == rec.shape


def test_polynomial_of_degree_three_and_a_source_term() -> None:
    n = 24

    def k(b: dict[int, np.ndarray]) -> None:
        u, c = b[0].reshape(1, n, n), b[1].reshape(1, n, n)
        lap = sum(shifted(u, 0, dy, dx, "wrap") for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[2][:] = (u - 0.1 * u ** 3 + 0.05 * c * (lap - 4 * u) + 0.01).reshape(-1)
    got = _probe(target(k, {0: ("float64", n * n), 1: ("float64", n * n),
                            2: ("float64", n * n)}, (n,), "float64"))
    p = got.program
    assert p.kind(p.outputs[0]) == "polynomial" and p.field("p1").role == "coef"
    poly = ex.polynomial(p.outputs[0].expr)
    assert poly[()] == pytest.approx(0.01) and p.periodic() == (False, True, True)


def test_max_abs_residual_written_not_accumulated() -> None:
    n = 20

    def k(b: dict[int, np.ndarray]) -> None:
        u = b[0].reshape(1, n, n)
        new = 0.5 * u + 0.125 * sum(shifted(u, 0, dy, dx, "zero")
                                    for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[1][:] = new.reshape(-1)
        b[2][0] = np.abs(new - u).max()
    got = _probe(target(k, {0: ("float32", n * n), 1: ("float32", n * n), 2: ("float32", 1)},
                        (n,), "float32"))
    (red,) = got.program.reductions
    assert (red.op, red.accumulate, red.over) == ("maxabs", False, "computed")
    assert got.reductions == {"p2": 2}


@pytest.mark.parametrize(("body", "words"), [
    (lambda u: np.sqrt(np.abs(u)) + shifted(u, 0, 0, 1, "zero"), "no polynomial"),
    (lambda u: np.maximum(u, shifted(u, 0, 1, 0, "zero")), "no polynomial"),
    (lambda u: u * (1 + np.arange(u.shape[2]) / 8) + shifted(u, 0, 0, 1, "zero"),
     "no polynomial"),
    (lambda u: np.broadcast_to(u.sum(), u.shape), "not local"),
    (lambda u: np.where(np.pad(np.ones((1, 14, 14)), ((0, 0), (1, 1), (1, 1))) > 0,
                        u + 0.5 * shifted(u, 0, 1, 0, "zero"), 2 * u), "follow no rule"),
])
def test_kernels_that_are_no_program_are_refused(body: object, words: str) -> None:
    n = 16
    r = lift_probe(target(generic(n, body), {1: ("float32", n * n), 2: ("float32", n * n)},  # type: ignore[arg-type]
                          (n,), "float32"))
    assert isinstance(r, NotLifted) and words in r.reason, r


def test_refusals_of_roles_and_effects() -> None:
    n = 32

    def racy(b: dict[int, np.ndarray]) -> None:  # in place, reading neighbours
        b[0][1:-1] = 0.5 * (b[0][:-2] + b[0][2:])
    r = lift_probe(target(racy, {0: ("float32", n)}, (n,), "float32"))
    assert isinstance(r, NotLifted) and "order of the threads" in r.reason, r

    def spill(b: dict[int, np.ndarray]) -> None:  # writes one element past the grid
        b[1][:n] = 2 * b[0][:n]
        b[1][n] = 1.0
    r = lift_probe(target(spill, {0: ("float32", n), 1: ("float32", n + 8)}, (n,), "float32"))
    assert isinstance(r, NotLifted) and "past the grid" in r.reason, r

    def odd_scalar(b: dict[int, np.ndarray]) -> None:
        b[1][:] = 2 * b[0]
        b[2][0] = b[0].mean() + 3
    r = lift_probe(target(odd_scalar, {0: ("float32", n), 1: ("float32", n),
                                       2: ("float32", 1)}, (n,), "float32"))
    assert isinstance(r, NotLifted) and "none of the residuals" in r.reason, r

    def only_scalar(b: dict[int, np.ndarray]) -> None:
        b[1][0] = b[0].sum()
    r = lift_probe(target(only_scalar, {0: ("float32", 64), 1: ("float32", 1)}, (64,),
                          "float32"))
    assert isinstance(r, NotLifted) and "only scalars" in r.reason, r

    def ints(b: dict[int, np.ndarray]) -> None:
        b[1][:] = b[0] + 1
    r = lift_probe(target(ints, {0: ("int32", 64), 1: ("int32", 64)}, (64,), "int32"))
    assert isinstance(r, NotLifted) and "int32" in r.reason, r


def test_three_time_levels_and_half_precision() -> None:
    n = 20

    def wave(b: dict[int, np.ndarray]) -> None:  # next = 2 cur - prev + c L(cur), zero outside
        cur, prev = b[0].reshape(1, n, n), b[1].reshape(1, n, n)
        lap = sum(shifted(cur, 0, dy, dx, "zero") for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[2][:] = (2 * cur - prev + 0.2 * (lap - 4 * cur)).reshape(-1)
    got = _probe(target(wave, {0: ("float64", n * n), 1: ("float64", n * n),
                               2: ("float64", n * n)}, (n,), "float64"))
    p = got.program
    assert [f.role for f in p.fields] == ["in", "in", "out"] and p.rule("y+").rule == "zeropad"
    assert ex.polynomial(p.outputs[0].expr)[(("p1", (0, 0, 0)),)] == pytest.approx(-1)

    def half(b: dict[int, np.ndarray]) -> None:
        u = b[0].reshape(1, n, n)
        s = sum(shifted(u, 0, dy, dx, "wrap") for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)))
        b[1][:] = (np.float16(0.5) * u + np.float16(0.125) * s).astype(np.float16).reshape(-1)
    got = _probe(target(half, {0: ("float16", n * n), 1: ("float16", n * n)}, (n,), "float16"))
    assert got.program.precision == "fp16" and got.program.periodic() == (False, True, True)
    poly = ex.polynomial(got.program.outputs[0].expr)
    assert poly[(("p0", (0, 0, 0)),)] == pytest.approx(0.5) and len(poly) == 5


@pytest.mark.slow
def test_a_padded_grid_past_the_pointer() -> None:
    # fdtd3d's layout: the grid (interior + 2-point halo) starts 6 elements past the pointer
    nx, ny, nz, r, pad = 12, 10, 10, 2, 6
    ox, oy, oz = nx + 2 * r, ny + 2 * r, nz + 2 * r
    size = ox * oy * oz

    def k(b: dict[int, np.ndarray]) -> None:
        u = b[1][pad:pad + size].reshape(oz, oy, ox)
        out = b[0][pad:pad + size].reshape(oz, oy, ox)
        s = 0.4 * u + sum(0.1 / d * (shifted(u, *o, "zero") + shifted(u, *(-v for v in o), "zero"))
                          for d in (1, 2) for o in ((0, 0, d), (0, d, 0), (d, 0, 0)))
        out[r:-r, r:-r, r:-r] = s[r:-r, r:-r, r:-r]
    got = _probe(target(k, {0: ("float32", size + pad), 1: ("float32", size + pad)},
                        (nx, ny, nz, pad), "float32"))
    assert got.shape == (ox, oy, oz) and dict(got.offsets) == {"p0": pad, "p1": pad}
    p = got.program
    assert {(f.rule, f.width) for f in p.faces} == {("keep", r)}
    assert len(ex.polynomial(p.outputs[0].expr)) == 13


def test_large_grids_are_fitted_and_checked_on_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernforge.apps import lift_probe, lift_probe_faces, lift_probe_shapes

    monkeypatch.setattr(lift_probe, "MAX_ROWS", 50)
    monkeypatch.setattr(lift_probe_faces, "LAYER_POINTS", 5)
    monkeypatch.setattr(lift_probe_shapes, "CHECK_ALL", 64)
    n = 24
    got = _probe(target(heat_zeropad(n, 0.1), {1: ("float64", n * n), 2: ("float64", n * n)},
                        (n,), "float64"))
    assert got.program.rule("x-").rule == "zeropad"
    assert ex.polynomial(got.program.outputs[0].expr)[(("p1", (0, 0, 0)),)] == \
        pytest.approx(0.6)
    pts = lift_probe_shapes.check_points((1, n, n), 2)
    assert pts[0].size == n * n + (1 << 16) and not pts[0].any()
    edge = (pts[1] < 4) | (pts[1] >= n - 4)
    assert 0.4 < edge[n * n:].mean() < 0.9  # edges and corners drawn on purpose


class _Recorded:
    """A target whose recorded launch left ``arrays`` (as raw bytes)."""

    def __init__(self, *arrays: np.ndarray) -> None:
        self.arrays = arrays

    def run(self, _inputs: object) -> dict[int, np.ndarray]:
        return {i: a.view(np.uint8) for i, a in enumerate(self.arrays)}


def test_float64_values_with_short_mantissas_are_read_as_float64_first() -> None:
    from kernforge.apps.lift_probe_shapes import likely_types

    # 1.0, 2.5, ... as float64 read as float32 alternate zeros with plausible numbers: a tie
    short = np.arange(1, 75, dtype=np.float64) / 4
    assert likely_types(_Recorded(short, short * 2))[0] == "float64"  # type: ignore[arg-type]
    # float32 values widened to float64 (what a program filling a double array from floats has)
    widened = ((np.arange(74) * 7919 % 1000) / 1000).astype(np.float32).astype(np.float64)
    assert likely_types(_Recorded(widened))[0] == "float64"  # type: ignore[arg-type]
    # float32 data keeps float32 first; random float64 data keeps float64 first
    rng = np.random.default_rng(3)
    f32 = rng.standard_normal(74).astype(np.float32)
    assert likely_types(_Recorded(f32))[0] == "float32"  # type: ignore[arg-type]
    assert likely_types(_Recorded(rng.standard_normal(37)))[0] == "float64"  # type: ignore[arg-type]
