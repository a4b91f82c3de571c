"""The boundary rule of each face of a probed kernel (:mod:`.lift_probe`, step 4).

Per output and face, the layers at distance 0, 1, ... from the face (away from the other
faces, by :data:`~.probe.RMAX` points) are compared with what each rule would write there: the
output's old value (keep), zero, an input's value (copy), and the formula evaluated with
zeros outside the grid (zeropad), the nearest point inside (clamp) or wrapped (periodic;
within the program's error bound). The
outermost layers that the formula does not explain must share one of keep, zero or copy: that
rule, as wide as those layers. The outputs must agree per face.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..stencil.program import FACES, FaceRule, Field, StencilProgram
from ..stencil.program import expr as ex
from ..stencil.program.pointwise import at
from .lift_probe_shapes import check_points
from .lift_probe_steps import several_steps
from .lift_symbolic import MAX_WIDTH
from .probe import RMAX

EVALUATED = ("zeropad", "clamp", "periodic")  # rules that evaluate the formula at the face
LAYER_POINTS = 4096  # points of one layer compared (a fixed sample on large grids)

if TYPE_CHECKING:
    from .lift_probe import _Lifter


def face_rules(lf: _Lifter, outs: Mapping[str, ex.Expr], fields: list[Field],
               x: Mapping[int, np.ndarray], y: Mapping[int, np.ndarray]
               ) -> tuple[tuple[FaceRule, ...], dict[str, str]]:
    """Per face, the rule its layers follow (see the module docstring)."""
    from .lift_probe import _Fail

    arrays = {f.name: lf.grid(x, f.name) for f in fields}
    progs = {rule: lf.program(fields, outs, tuple(FaceRule(rule) for _ in FACES), {}, ())
             for rule in EVALUATED}
    rules: list[FaceRule] = []
    copy: dict[str, str] = {}
    for face in FACES:
        a = "zyx".index(face[0])
        if a < 3 - lf.dims:
            rules.append(FaceRule("keep", 0))
            continue
        try:
            found = {_face(lf, face, name, e, arrays, progs, lf.grid(y, name), copy)
                     for name, e in outs.items()}
        except _Fail:
            why = several_steps(outs)
            if why is not None:
                raise _fail(why, definite=True) from None
            raise
        evaluated = {r for r in found if r.rule in EVALUATED}
        writing = {r for r in found if r.rule not in EVALUATED}
        if len(evaluated) > 1 or (writing and evaluated) or len(writing - {FaceRule("keep", 0)
                                                                           }) > 1:
            if writing == {FaceRule("keep", 0)} and len(evaluated) == 1:
                rules.append(evaluated.pop())
                continue
            raise _fail(f"the outputs follow different rules at face {face}: "
                        f"{sorted((r.rule, r.width) for r in found)}")
        rules.append((evaluated or writing - {FaceRule("keep", 0)} or writing).pop())
    return tuple(rules), copy


def layer(shape: tuple[int, ...], face: str, k: int, dims: int, limit: int = LAYER_POINTS
          ) -> tuple[np.ndarray, ...]:
    """(z, y, x) index arrays of the points ``k`` layers in from ``face``, at least
    :data:`~.probe.RMAX` from the other faces, or as far as a short axis allows (hotspot3D's
    8 layers: the middle one or two; at most ``limit`` of them, a fixed sample)."""
    a = "zyx".index(face[0])
    ranges = []
    for i in range(3):
        if i == a:
            ranges.append(np.array([k if face[1] == "-" else shape[i] - 1 - k]))
        elif i < 3 - dims:
            ranges.append(np.arange(shape[i]))
        else:
            m = min(RMAX, (shape[i] - 1) // 2)
            ranges.append(np.arange(m, shape[i] - m))
    grid = [g.reshape(-1) for g in np.meshgrid(*ranges, indexing="ij")]
    if grid[0].size > limit:
        pick = np.sort(np.random.default_rng(k).choice(grid[0].size, limit, replace=False))
        grid = [g[pick] for g in grid]
    return tuple(grid)


def _face(lf: _Lifter, face: str, name: str, e: ex.Expr, arrays: Mapping[str, np.ndarray],
          progs: Mapping[str, StencilProgram], got: np.ndarray, copy: dict[str, str]
          ) -> FaceRule:
    a = "zyx".index(face[0])
    reach = ex.reach(e)[face]
    flat = {f: v.reshape(v.shape[3 - lf.dims:]) for f, v in arrays.items()}
    layers = []
    for k in range(min(MAX_WIDTH, RMAX, got.shape[a] // 2)):
        pts = layer(got.shape, face, k, lf.dims)
        g = got[pts]
        hits = set()
        for rule, prog in progs.items():
            want = at(prog, flat, pts[3 - lf.dims:])[name]
            bound = at(prog, flat, pts[3 - lf.dims:], bound=True)[name]
            if np.all(np.abs(g - want) <= 8 * bound):
                hits.add(rule)
        cands = {"zero": np.zeros(g.shape), **{f"copy:{f}": v[pts] for f, v in arrays.items()
                                                if f != name}}
        if name in arrays:
            cands["keep"] = arrays[name][pts]
        hits |= {c for c, v in cands.items() if np.array_equal(g, v)}
        layers.append(hits)
    w = 0
    while w < len(layers) and not layers[w] & set(EVALUATED):
        w += 1
    if w:
        common = set.intersection(*layers[:w]) - set(EVALUATED)
        if not common:
            raise _fail(f"the layers next to face {face} of {name} follow no rule "
                        "(kept, copied, zero, zero-padded, clamped or periodic)")
        if w < reach:
            raise _fail(f"{name}: {w} layers at face {face} are left out, but the "
                        f"stencil reaches {reach} past it")
        rule = min(common)
        if rule.startswith("copy:"):
            if copy.setdefault(name, rule[5:]) != rule[5:]:
                raise _fail(f"{name} copies different fields at different faces")
            rule = "copy"
        return FaceRule(rule, w)
    if reach == 0:
        return FaceRule("keep", 0)
    ev = set.intersection(*layers[:reach]) & set(EVALUATED)
    if not ev:
        raise _fail(f"the layers next to face {face} of {name} mix rules")
    return FaceRule(next(r for r in EVALUATED if r in ev))


def verify(lf: _Lifter, prog: StencilProgram, used: set[str], unit: bool) -> None:
    """The program against a fresh run (values at the recorded magnitudes, or in [-1, 1) when
    ``unit``) at every point (a sample on large grids): why not, when it differs."""
    x = lf.random(unit)
    y, _ = lf.run(x)
    flat = {nm: lf.grid(x, nm).reshape(lf.grid(x, nm).shape[3 - lf.dims:])
            for nm in used}
    pts = check_points(lf.grid(x, next(iter(used))).shape, lf.dims)
    outs = at(prog, flat, pts[3 - lf.dims:])
    bound = at(prog, flat, pts[3 - lf.dims:], bound=True)
    values = "in [-1, 1)" if unit else "at the recorded contents' magnitudes"
    for o in prog.outputs:
        bad = ~(np.abs(lf.grid(y, o.field)[pts] - outs[o.field]) <= 8 * bound[o.field])
        if not bad.any():
            continue
        reach = ex.reach(o.expr)
        shape = lf.grid(y, o.field).shape
        inside = np.ones(bad.shape, dtype=bool)  # the formula alone decides these points
        for i, a in enumerate("zyx"):
            if i >= 3 - lf.dims:
                inside &= (pts[i] >= reach[f"{a}-"] + RMAX) & \
                    (pts[i] < shape[i] - reach[f"{a}+"] - RMAX)
        first = int(np.argmax(bad & inside)) if (bad & inside).any() else int(np.argmax(bad))
        where = f"(z={pts[0][first]}, y={pts[1][first]}, x={pts[2][first]})"
        if inside[first]:
            raise _fail(f"{o.field} differs from the lifted program at {where}, away from "
                        f"the faces, on fresh inputs {values} ({int(bad.sum())} of "
                        f"{bad.size} points): the fitted formula misses part of what the "
                        "kernel computes")
        raise _fail(f"{o.field} differs from the lifted program at {where} on fresh inputs "
                    f"{values}: the edges or corners follow no per-face rule")


def _fail(reason: str, definite: bool = False) -> Exception:
    from .lift_probe import _Fail

    return _Fail(reason, definite)
