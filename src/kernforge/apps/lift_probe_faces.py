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

from ..stencil.program import FACES, FaceRule, Field
from ..stencil.program import expr as ex
from .lift_symbolic import MAX_WIDTH
from .probe import RMAX

EVALUATED = ("zeropad", "clamp", "periodic")  # rules that evaluate the formula at the face

if TYPE_CHECKING:
    from .lift_probe import _Lifter


def face_rules(lf: _Lifter, outs: Mapping[str, ex.Expr], fields: list[Field],
               x: Mapping[int, np.ndarray], y: Mapping[int, np.ndarray]
               ) -> tuple[tuple[FaceRule, ...], dict[str, str]]:
    """Per face, the rule its layers follow (see the module docstring)."""
    arrays = {f.name: lf.grid(x, f.name) for f in fields}
    preds = {}
    for rule in EVALUATED:
        p = lf.program(fields, outs, tuple(FaceRule(rule) for _ in FACES), {}, ())
        preds[rule], bound = lf.apply(p, arrays)
    rules: list[FaceRule] = []
    copy: dict[str, str] = {}
    for face in FACES:
        a = "zyx".index(face[0])
        if a < 3 - lf.dims:
            rules.append(FaceRule("keep", 0))
            continue
        found = {_face(lf, face, name, e, arrays, preds, bound[name],
                      lf.grid(y, name), copy) for name, e in outs.items()}
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

def _face(lf: _Lifter, face: str, name: str, e: ex.Expr, arrays: Mapping[str, np.ndarray],
          preds: Mapping[str, Mapping[str, np.ndarray]], bound: np.ndarray, got: np.ndarray,
          copy: dict[str, str]) -> FaceRule:
    a = "zyx".index(face[0])
    reach = ex.reach(e)[face]
    cands = {"keep": arrays.get(name, None), "zero": 0.0,
             **{f"copy:{f}": v for f, v in arrays.items() if f != name}}
    layers = []
    for k in range(min(MAX_WIDTH, RMAX, got.shape[a] // 2)):
        idx: list[slice | int] = []
        for i in range(3):
            if i == a:
                idx.append(k if face[1] == "-" else got.shape[i] - 1 - k)
            elif i < 3 - lf.dims:
                idx.append(slice(None))
            else:
                idx.append(slice(RMAX, got.shape[i] - RMAX))
        sel = tuple(idx)
        g = got[sel]
        hits = {r for r in EVALUATED if np.all(np.abs(g - preds[r][name][sel])
                                                             <= 8 * bound[sel])}
        hits |= {c for c, v in cands.items() if v is not None and
                 np.array_equal(g, np.broadcast_to(v, g.shape) if np.isscalar(v)
                                else v[sel])}  # type: ignore[index]
        layers.append(hits)
    w = 0
    while w < len(layers) and not layers[w] & set(EVALUATED):
        w += 1
    if w:
        common = set.intersection(*layers[:w]) - set(EVALUATED)
        if not common:
            raise _fail(f"the layers next to face {face} of {name} follow no rule "
                        "(kept, copied, zero, zero-padded or periodic)")
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



def _fail(reason: str) -> Exception:
    from .lift_probe import _Fail

    return _Fail(reason)
