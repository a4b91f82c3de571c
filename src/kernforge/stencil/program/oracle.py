"""The float64 oracle of a stencil program: apply it to numpy fields (vectorized).

Arrays are C-ordered with x contiguous: shape ``(nx,)``, ``(ny, nx)`` or ``(nz, ny, nx)`` for 1,
2 or 3 dimensions; every field of a program has the grid's shape. Scalar parameters are given
by index (``params``), ``__constant__`` values by name (``constants``: a number or a sequence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core import ConfigError
from . import expr as ex
from .model import FACES, StencilProgram

EPS = {"fp16": 2.0 ** -11, "fp32": 2.0 ** -24, "fp64": 2.0 ** -53}  # unit roundoff


@dataclass(frozen=True)
class Result:
    """Each written field after the launch, each reduction's value, and per output the points
    its expression computed (the rest followed a keep, copy or zero face)."""

    outputs: dict[str, np.ndarray]
    reductions: dict[str, float]
    computed: dict[str, np.ndarray]


def _grid(p: StencilProgram, fields: Mapping[str, np.ndarray]) -> tuple[int, int, int]:
    shapes = {np.shape(a) for a in fields.values()}
    if len(shapes) != 1:
        raise ConfigError(f"fields of different shapes: {sorted(shapes)}",
                          hint="every field of a program has the grid's shape")
    shape = shapes.pop()
    if len(shape) != p.dims:
        raise ConfigError(f"a {p.dims}D program applied to arrays of shape {shape}",
                          hint="(nx,), (ny, nx) or (nz, ny, nx)")
    return tuple([1] * (3 - p.dims) + list(shape))  # type: ignore[return-value]


Pad = tuple[str, str]  # what a read below / above an axis's range sees: zero, wrap or clamp


def shift(g: np.ndarray, off: tuple[int, int, int],
          pads: tuple[bool | Pad, bool | Pad, bool | Pad]) -> np.ndarray:
    """``g[z+dz, y+dy, x+dx]`` of a 3D array; outside the grid along an axis, per side: zero,
    ``wrap`` (periodic) or ``clamp`` (the nearest point inside). ``True``/``False`` for an axis
    mean wrap/zero on both sides."""
    out = g
    for axis, d in enumerate(off):
        if not d:
            continue
        pad = pads[axis]
        lo, hi = (("wrap", "wrap") if pad else ("zero", "zero")) if isinstance(pad, bool) \
            else pad
        n = out.shape[axis]
        idx = np.arange(n) + d
        side = hi if d > 0 else lo
        if side == "wrap":
            idx %= n
        elif side == "clamp":
            idx = np.clip(idx, 0, n - 1)
        valid = (idx >= 0) & (idx < n)
        taken = np.take(out, np.clip(idx, 0, n - 1), axis=axis)
        if not valid.all():
            shape = [1, 1, 1]
            shape[axis] = n
            taken = np.where(valid.reshape(shape), taken, 0.0)
        out = taken
    return out


def _face_mask(face: str, width: int, shape: tuple[int, int, int]) -> np.ndarray:
    m = np.zeros(shape, dtype=bool)
    axis = "zyx".index(face[0])
    idx = [slice(None)] * 3
    idx[axis] = slice(0, width) if face[1] == "-" else slice(shape[axis] - width, shape[axis])
    if width:
        m[tuple(idx)] = True
    return m


class _Env:
    def __init__(self, p: StencilProgram, grids: Mapping[str, np.ndarray],
                 params: Mapping[int, float], constants: Mapping[str, Any]) -> None:
        self.p, self.grids, self.params, self.constants = p, grids, params, constants
        self.pads = p.pads()
        self._cache: dict[tuple[str, tuple[int, int, int]], np.ndarray] = {}

    def leaf(self, n: ex.Expr) -> Any:
        if isinstance(n, ex.Tap):
            k = (n.field, n.offset)
            if k not in self._cache:
                self._cache[k] = shift(self.grids[n.field], n.offset, self.pads)
            return self._cache[k]
        return ex.scalar_value(n, self.params, self.constants)

    def eval(self, e: ex.Expr, shape: tuple[int, int, int]) -> np.ndarray:
        v = ex.evaluate(e, self.leaf)
        return np.broadcast_to(np.asarray(v, dtype=np.float64), shape).copy()


def apply(p: StencilProgram, fields: Mapping[str, np.ndarray], *,
          params: Mapping[int, float] | None = None, constants: Mapping[str, Any] | None = None,
          reductions: Mapping[str, float] | None = None) -> Result:
    """What one launch of ``p`` computes, in float64. ``fields``: every field the program
    reads, and an ``out`` field's contents before the launch where a keep face leaves points
    of it (else they read as zero); ``reductions``: accumulated scalars' values before."""
    missing = [n for n in p.names("in", "coef", "inout") if n not in fields]
    if missing:
        raise ConfigError(f"no array for the fields {missing}", hint="fields={name: array}")
    unknown = [n for n in fields if n not in [f.name for f in p.fields]]
    if unknown:
        raise ConfigError(f"arrays for fields the program has not: {unknown}",
                          hint=f"fields: {[f.name for f in p.fields]}")
    shape = _grid(p, fields)
    g = {n: np.asarray(a, dtype=np.float64).reshape(shape) for n, a in fields.items()}
    for n in p.names("out"):
        g.setdefault(n, np.zeros(shape))
    env = _Env(p, g, params or {}, constants or {})
    outs: dict[str, np.ndarray] = {}
    computed: dict[str, np.ndarray] = {}
    for o in p.outputs:
        new = env.eval(o.expr, shape)
        done = np.ones(shape, dtype=bool)
        widths = p.widths(o)
        for face, fr in reversed(list(zip(FACES, p.faces, strict=True))):
            if not widths[face]:
                continue
            m = _face_mask(face, widths[face], shape)
            done &= ~m
            if fr.rule == "keep":
                new[m] = g[o.field][m]
            elif fr.rule == "copy":
                assert o.copy_from is not None  # validated
                new[m] = g[o.copy_from][m]
            else:
                new[m] = 0.0
        outs[o.field], computed[o.field] = new, done
    after = {**g, **outs}
    renv = _Env(p, after, params or {}, constants or {})
    every = np.logical_and.reduce(list(computed.values()))
    red: dict[str, float] = {}
    for r in p.reductions:
        v = renv.eval(r.expr, shape)
        v = v[every] if r.over == "computed" else v.reshape(-1)
        if r.op == "sum":
            val = float(v.sum())
        elif r.op == "sumsq":
            val = float((v * v).sum())
        else:
            val = float(np.abs(v).max()) if v.size else 0.0
        if r.accumulate:
            before = float((reductions or {}).get(r.name, 0.0))
            val = max(before, val) if r.op == "maxabs" else before + val
        red[r.name] = val
    final = {n: a.reshape(fields[n].shape if n in fields else shape[3 - p.dims:])
             for n, a in outs.items()}
    return Result(final, red, {n: m.reshape(shape[3 - p.dims:]) for n, m in computed.items()})


def error_bound(p: StencilProgram, fields: Mapping[str, np.ndarray], *,
                params: Mapping[int, float] | None = None,
                constants: Mapping[str, Any] | None = None, factor: float = 4.0
                ) -> dict[str, np.ndarray]:
    """Per output, per point: the absolute error a kernel computing ``p`` in its precision may
    make (any order of operations): ``factor * ops * eps * M``, with ``M`` the expression
    evaluated on absolute values (every ``-`` a ``+``) and ``ops`` its count of operations."""
    shape = _grid(p, {n: a for n, a in fields.items()})
    g = {n: np.abs(np.asarray(a, dtype=np.float64)).reshape(shape) for n, a in fields.items()}
    for n in p.names("out"):
        g.setdefault(n, np.zeros(shape))
    env = _Env(p, g, params or {}, constants or {})
    eps = EPS[p.precision]
    out = {}
    for o in p.outputs:
        v = ex.evaluate(_absolute(o.expr), lambda n: np.abs(env.leaf(n)))
        mag = np.broadcast_to(np.asarray(v, dtype=np.float64), shape)
        ops = 1 + sum(1 for n in ex.walk(o.expr) if isinstance(n, ex.Bin | ex.Neg))
        out[o.field] = (factor * ops * eps * mag + np.finfo(np.float64).tiny).reshape(
            shape[3 - p.dims:])
    return out


def _absolute(e: ex.Expr) -> ex.Expr:
    """``e`` with every ``-`` a ``+`` (its leaves are taken absolute when evaluated)."""
    if isinstance(e, ex.Neg):
        return _absolute(e.a)
    if isinstance(e, ex.Bin):
        return ex.Bin("+" if e.op in "+-" else e.op, _absolute(e.a), _absolute(e.b))
    return e
