"""Stencil programs: the model's validation, JSON and key, and the float64 oracle against a
point-by-point reference (no GPU)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from kernforge.core import ConfigError
from kernforge.stencil.program import (
    FACES,
    ConstMem,
    FaceRule,
    Param,
    Reduction,
    StencilProgram,
    apply,
    boundary,
    error_bound,
    program,
    tap,
)
from kernforge.stencil.program import expr as ex

RNG = np.random.default_rng(7)


def lap(f: str, dims: int) -> ex.Expr:
    axes = [(0, 0, 1), (0, 1, 0), (1, 0, 0)][:dims]
    s: ex.Expr = -2.0 * dims * tap(f)
    for o in axes:
        s = s + tap(f, *o) + tap(f, *(-v for v in o))
    return s


def reference(p: StencilProgram, fields: dict[str, np.ndarray], params: dict[int, float],
              constants: dict[str, object]) -> dict[str, np.ndarray]:
    """One point at a time: the face rules' precedence applied literally."""
    shape3 = (1,) * (3 - p.dims) + next(iter(fields.values())).shape
    g = {n: a.reshape(shape3) for n, a in fields.items()}
    out = {}
    for o in p.outputs:
        res = np.zeros(shape3)
        widths = p.widths(o)
        for z, y, x in itertools.product(*(range(n) for n in shape3)):
            pt = (z, y, x)
            rule = None
            for face, fr in zip(FACES, p.faces, strict=True):
                a = "zyx".index(face[0])
                inside = pt[a] < widths[face] if face[1] == "-" else \
                    pt[a] >= shape3[a] - widths[face]
                if inside:
                    rule = fr.rule
                    break

            def leaf(n: ex.Expr, pt: tuple[int, int, int] = pt) -> float:
                if not isinstance(n, ex.Tap):
                    return ex.scalar_value(n, params, constants)
                q = []
                for a, (c, d) in enumerate(zip(pt, n.offset, strict=True)):
                    v = c + d
                    side = p.rule(f"{'zyx'[a]}{'-' if v < 0 else '+'}").rule
                    if p.periodic()[a]:
                        v %= shape3[a]
                    elif side == "clamp" and not 0 <= v < shape3[a]:
                        v = min(max(v, 0), shape3[a] - 1)
                    elif not 0 <= v < shape3[a]:
                        return 0.0
                    q.append(v)
                return float(g[n.field][tuple(q)])
            if rule == "keep":
                res[pt] = g[o.field][pt] if o.field in g else 0.0
            elif rule == "copy":
                res[pt] = g[o.copy_from][pt]  # type: ignore[index]
            elif rule == "zero":
                res[pt] = 0.0
            else:
                res[pt] = ex.evaluate(o.expr, leaf)
        out[o.field] = res.reshape(fields[next(iter(fields))].shape)
    return out


def check(p: StencilProgram, shape: tuple[int, ...], params: dict[int, float] | None = None,
          constants: dict[str, object] | None = None) -> None:
    fields = {f.name: RNG.uniform(-1, 1, shape) for f in p.fields}
    got = apply(p, fields, params=params, constants=constants)
    want = reference(p, fields, params or {}, constants or {})
    for n, a in want.items():
        np.testing.assert_allclose(got.outputs[n], a, rtol=1e-13, atol=1e-13, err_msg=n)
    q = StencilProgram.from_json(json.loads(json.dumps(p.to_json())))
    assert q == p and q.key == p.key


def test_heat_2d_zero_padded_and_periodic() -> None:
    e = 0.6 * tap("u") + 0.1 * (tap("u", 0, 0, 1) + tap("u", 0, 0, -1) + tap("u", 0, 1, 0)
                                 + tap("u", 0, -1, 0))
    check(program(2, "fp64", {"v": e}, faces=boundary("zeropad")), (7, 9))
    check(program(2, "fp32", {"v": e}, faces=boundary("periodic")), (6, 5))
    mixed = boundary("zeropad", {"x-": "periodic", "x+": "periodic", "y-": "keep"})
    check(program(2, "fp32", {"v": e}, faces=mixed), (6, 8))
    clamped = boundary("clamp", {"y+": "zeropad", "x-": "zero"})  # hotspot replicates edges
    check(program(2, "fp32", {"v": e + tap("u", 0, -2, 0)}, faces=clamped), (7, 6))


def test_coefficient_field_3d_copy_boundary_with_params() -> None:
    e = tap("u") + Param(4, "dt") * tap("sigma") * lap("u", 3)
    p = program(3, "fp32", {"un": e}, roles={"sigma": "coef"}, faces=boundary("copy"))
    assert p.field("sigma").role == "coef" and p.output("un").copy_from == "u"
    assert p.kind(p.outputs[0]) == "bilinear" and p.params() == [4]
    check(p, (5, 6, 7), params={4: 0.1})


def test_wave_two_time_levels_in_place_and_constant_memory() -> None:
    # next = 2 cur - prev + c L(cur), written over prev: prev is in-out
    e = 2.0 * tap("cur") - tap("prev") + ConstMem("c2") * lap("cur", 2)
    p = program(2, "fp64", {"prev": e}, faces=boundary("keep"))
    assert p.field("prev").role == "inout" and p.constants() == ["c2"]
    check(p, (8, 8), constants={"c2": 0.2})


def test_several_outputs_mixed_faces_and_keep_width() -> None:
    ex_ = tap("ex") + 0.5 * (tap("hz", 0, 1, 0) - tap("hz"))
    hz = tap("hz") - 0.5 * (tap("ex", 0, 1, 0) - tap("ex")) + ConstMem("k", 2, True) * tap("ex")
    faces = boundary("keep", {"y+": FaceRule("zero", 2), "x-": "copy"}, width=None)
    p = program(2, "fp32", {"exn": ex_, "hzn": hz}, faces=faces,
                copy_from={"exn": "ex", "hzn": "hz"})
    assert p.names("out") == ["exn", "hzn"] and p.names("in") == ["ex", "hz"]
    check(p, (9, 7), constants={"k": [0.0, 0.0, 0.3]})


def test_bilinear_advection_1d_and_polynomial() -> None:
    adv = tap("u") - 0.25 * tap("u") * (tap("u", 0, 0, 1) - tap("u", 0, 0, -1))
    p = program(1, "fp64", {"w": adv}, faces=boundary("periodic"))
    check(p, (17,))
    cubic = program(1, "fp16", {"w": tap("u") * tap("u") * tap("u", 0, 0, 1) / 3.0})
    assert cubic.kind(cubic.outputs[0]) == "polynomial"
    check(cubic, (11,))


def test_jacobi_residual_reduction() -> None:
    new = 0.25 * (tap("f", 0, 0, 1) + tap("f", 0, 0, -1) + tap("f", 0, 1, 0) + tap("f", 0, -1, 0))
    red = Reduction("err", "sumsq", tap("g") - tap("f"), accumulate=True)
    p = program(2, "fp32", {"g": new}, reductions=[red])
    f = RNG.uniform(-1, 1, (10, 12))
    r = apply(p, {"f": f}, reductions={"err": 1.5})
    inner = (slice(1, -1), slice(1, -1))
    want = 0.25 * (f[1:-1, 2:] + f[1:-1, :-2] + f[2:, 1:-1] + f[:-2, 1:-1])
    np.testing.assert_allclose(r.outputs["g"][inner], want, atol=1e-15)
    assert r.reductions["err"] == pytest.approx(1.5 + ((want - f[inner]) ** 2).sum())
    assert r.computed["g"].sum() == 8 * 10
    m = program(2, "fp32", {"g": new}, reductions=[Reduction("e", "maxabs", tap("g"), over="all")])
    assert apply(m, {"f": f}).reductions["e"] == pytest.approx(np.abs(want).max())


def test_error_bound_scales_with_precision() -> None:
    e = tap("u") - 0.25 * tap("u", 0, 0, 1)
    x = RNG.uniform(-1, 1, (4, 6))
    b16 = error_bound(program(2, "fp16", {"v": e}), {"u": x})["v"]
    b64 = error_bound(program(2, "fp64", {"v": e}), {"u": x})["v"]
    assert b16.shape == x.shape and np.all(b16 > b64 * 1e10)
    got = apply(program(2, "fp16", {"v": e}, faces=boundary("zeropad")), {"u": x}).outputs["v"]
    x16 = x.astype(np.float16)
    half = (x16 - np.float16(0.25) * np.pad(x16, ((0, 0), (0, 1)))[:, 1:]).astype(np.float64)
    assert np.all(np.abs(half - got) <= b16)


@pytest.mark.parametrize(("build", "words"), [
    (lambda: program(4, "fp32", {"v": tap("u")}), "dims"),
    (lambda: program(2, "bf16", {"v": tap("u")}), "precision"),
    (lambda: program(2, "fp32", {"v": tap("u", 1, 0, 0)}), "2D grid"),
    (lambda: program(2, "fp32", {"u": tap("u", 0, 0, 1)}), "order of the threads"),
    (lambda: program(2, "fp32", {"v": tap("u") / tap("w")}), "division by an expression"),
    (lambda: program(2, "fp32", {"v": tap("u") / 0.0}), "division by zero"),
    (lambda: program(2, "fp32", {"v": tap("u", 0, 0, 2)},
                     faces=boundary("keep", {"x+": FaceRule("keep", 1)})), "reaches 2"),
    (lambda: program(2, "fp32", {"v": tap("u")}, faces=boundary("keep", {"x-": "periodic"})),
     "one face only"),
    (lambda: program(2, "fp32", {"v": tap("a") + tap("b")}, faces=boundary("copy")),
     "copy_from"),
    (lambda: program(2, "fp32", {"v": tap("u")}, roles={"v": "in"}), "role in"),
    (lambda: program(2, "fp32", {"v": tap("u")}, reductions=[Reduction("r", "avg", tap("v"))]),
     "op 'avg'"),
    (lambda: program(2, "fp32", {"v": tap("u")},
                     reductions=[Reduction("r", "sum", tap("v", 0, 0, 1))]), "written field"),
    (lambda: StencilProgram.from_json({"dims": 2}), "malformed"),
    (lambda: program(2, "fp32", {"v": ConstMem("c") * tap("u") + ConstMem("c", 1, True)}),
     "both as a scalar and as an array"),
    (lambda: StencilProgram.from_json({"dims": 2, "precision": "fp32", "fields": [],
                                       "outputs": [{"field": "v", "expr": {"tap": "u",
                                                                           "at": [0]}}]}),
     "malformed"),
    (lambda: program(2, "fp32", {"v": tap("u")}, roles={"sigma": "coef"}), "['sigma']"),
    (lambda: _doc(at=[0, 0, 1.5]), "1.5 is not an integer"),
    (lambda: _doc(at=[0, 0, True]), "True is not an integer"),
    (lambda: _doc(dims=2.7), "2.7 is not an integer"),
    (lambda: _doc(name=None), "None is not a string"),
    (lambda: _doc(expr={"cmem": "c", "array": "false"}), "'false' is not true or false"),
    (lambda: _doc(expr={"param": 2.9}), "2.9 is not an integer"),
])
def test_invalid_programs_are_typed_errors(build: object, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()  # type: ignore[operator]
    assert words in str(info.value) and info.value.hint


def _doc(at: list[object] | None = None, expr: dict[str, object] | None = None,
         **top: object) -> StencilProgram:
    """A valid document with one value replaced, read back (numbers and booleans of a JSON
    document are taken as they are, never rounded or read from strings)."""
    d = program(2, "fp32", {"v": tap("u", 0, 0, 1)}).to_json()
    if at is not None:
        d["outputs"][0]["expr"]["at"] = at
    if expr is not None:
        d["outputs"][0]["expr"] = {"op": "*", "args": [expr, {"tap": "u", "at": [0, 0, 0]}]}
    return StencilProgram.from_json({**d, **top})


def test_kinds() -> None:
    u = tap("u")

    def kind(e: ex.Expr) -> str:
        p = program(1, "fp32", {"v": e})
        return p.kind(p.outputs[0])
    assert kind(Param(0) * u - u) == "linear"
    assert kind(u + Param(0) * ConstMem("c")) == "affine"
    assert kind(Param(0) * u + (ConstMem("c") - ConstMem("c"))) == "linear"
    assert kind(u * tap("w") + 1.0) == "bilinear"


def test_key_ignores_the_name_and_follows_the_content() -> None:
    a = program(2, "fp32", {"v": 0.5 * tap("u")}, name="a")
    assert a.key == program(2, "fp32", {"v": 0.5 * tap("u")}, name="b").key
    assert a.key != program(2, "fp64", {"v": 0.5 * tap("u")}).key
    assert a.key != program(2, "fp32", {"v": 0.25 * tap("u")}).key
    assert "v = 0.5 * u[0,0,0]" in a.describe()


def test_polynomial_expansion() -> None:
    e = (tap("u") + 2.0) * (tap("u") - Param(0)) / ConstMem("d")
    poly = ex.polynomial(e, {0: 3.0}, {"d": 2.0})
    u = ("u", (0, 0, 0))
    assert poly == {(u, u): 0.5, (u,): -0.5, (): -3.0}
    with pytest.raises(ConfigError, match="scalar parameter 0"):
        ex.polynomial(e)


def test_apply_reports_missing_and_misshapen_fields() -> None:
    p = program(2, "fp32", {"v": tap("u") * tap("c")})
    with pytest.raises(ConfigError, match="no array"):
        apply(p, {"u": np.zeros((3, 3))})
    with pytest.raises(ConfigError, match="different shapes"):
        apply(p, {"u": np.zeros((3, 3)), "c": np.zeros((3, 4))})
    with pytest.raises(ConfigError, match="2D program"):
        apply(p, {"u": np.zeros(3), "c": np.zeros(3)})


def test_pointwise_oracle_equals_the_whole_grid_one() -> None:
    from kernforge.stencil.program.pointwise import at

    e = tap("u") * tap("c") + 0.3 * (tap("u", 0, 0, 1) - tap("u", 0, -1, 0)) - ConstMem("k")
    for faces in (boundary("clamp", {"y-": "zeropad", "x+": FaceRule("copy", 2)}),
                  boundary("periodic", {"y-": FaceRule("keep", 1), "y+": "zero"})):
        p = program(2, "fp32", {"v": e}, faces=faces, roles={"c": "coef"},
                    copy_from={"v": "u"})
        f = {n: RNG.uniform(-1, 1, (9, 11)) for n in ("u", "c", "v")}
        whole = apply(p, f, constants={"k": 0.5}).outputs["v"]
        bound = error_bound(p, f, constants={"k": 0.5})["v"]
        pts = np.nonzero(RNG.uniform(size=(9, 11)) < 0.6)
        np.testing.assert_allclose(at(p, f, pts, constants={"k": 0.5})["v"], whole[pts],
                                   atol=1e-15)
        b = at(p, f, pts, constants={"k": 0.5}, bound=True)["v"]
        inner = apply(p, f, constants={"k": 0.5}).computed["v"][pts]
        np.testing.assert_allclose(b[inner], bound[pts][inner], rtol=1e-12)
