"""The float64 oracle at chosen points only (for grids too large to evaluate whole, and for
checks on samples): the same values and error bounds as :func:`.oracle.apply` and
:func:`.oracle.error_bound` give there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core import ConfigError
from . import expr as ex
from .model import FACES, StencilProgram
from .oracle import EPS, _absolute, _grid

Points = tuple[np.ndarray, ...]


def at(p: StencilProgram, fields: Mapping[str, np.ndarray], points: Points, *,
       params: Mapping[int, float] | None = None, constants: Mapping[str, Any] | None = None,
       bound: bool = False, factor: float = 4.0) -> dict[str, np.ndarray]:
    """Each output's value after the launch at ``points`` (index arrays, one per axis of the
    fields, as ``np.nonzero`` gives them), or with ``bound`` its error bound there."""
    missing = [n for n in p.names("in", "coef", "inout") if n not in fields]
    if missing:
        raise ConfigError(f"no array for the fields {missing}", hint="fields={name: array}")
    shape = _grid(p, fields)
    if len(points) != p.dims:
        raise ConfigError(f"{len(points)} index arrays for a {p.dims}D program",
                          hint="one per axis, as np.nonzero gives them")
    pts = [np.zeros_like(points[0]) for _ in range(3 - p.dims)] + [np.asarray(q) for q in points]
    g = {n: np.asarray(a, dtype=np.float64).reshape(shape) for n, a in fields.items()}
    pads = p.pads()
    prm, cst = params or {}, constants or {}

    def leaf(n: ex.Expr) -> Any:
        if not isinstance(n, ex.Tap):
            s = ex.scalar_value(n, prm, cst)
            return abs(s) if bound else s
        if n.field not in g:
            return np.zeros(pts[0].shape)
        idx, ok = [], np.ones(pts[0].shape, dtype=bool)
        for a in range(3):
            size = shape[a]
            i: np.ndarray = pts[a] + n.offset[a]
            for side, mask in ((pads[a][0], i < 0), (pads[a][1], i >= size)):
                if side == "wrap":
                    i = np.where(mask, i % size, i)
                elif side == "clamp":
                    i = np.where(mask, np.clip(i, 0, size - 1), i)
                else:
                    ok &= ~mask
            idx.append(np.clip(i, 0, size - 1))
        v = np.where(ok, g[n.field][idx[0], idx[1], idx[2]], 0.0)
        return np.abs(v) if bound else v

    out = {}
    for o in p.outputs:
        e = _absolute(o.expr) if bound else o.expr
        val = np.broadcast_to(np.asarray(ex.evaluate(e, leaf), dtype=np.float64),
                              pts[0].shape).copy()
        if bound:
            ops = 1 + sum(1 for n in ex.walk(o.expr) if isinstance(n, ex.Bin | ex.Neg))
            val = factor * ops * EPS[p.precision] * val + np.finfo(np.float64).tiny
        widths = p.widths(o)
        for face, fr in reversed(list(zip(FACES, p.faces, strict=True))):
            w = widths[face]
            if not w:
                continue
            a = "zyx".index(face[0])
            m = pts[a] < w if face[1] == "-" else pts[a] >= shape[a] - w
            if bound:
                val[m] = np.finfo(np.float64).tiny
            elif fr.rule == "keep":
                val[m] = g[o.field][pts[0][m], pts[1][m], pts[2][m]] if o.field in g else 0.0
            elif fr.rule == "copy":
                assert o.copy_from is not None  # validated
                val[m] = g[o.copy_from][pts[0][m], pts[1][m], pts[2][m]]
            else:
                val[m] = 0.0
        out[o.field] = val
    return out
