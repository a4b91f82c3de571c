"""Lifting a stencil program by probing the replayed kernel (docs/stencil-programs.md).

The generalization of :func:`~kernforge.apps.probe.recognize` to several inputs and outputs,
coefficient fields, in-place updates, time levels, polynomial terms and residual reductions.
Through the same :class:`~kernforge.apps.probe.Target`:

1. **Roles.** Every written buffer of at least 16 elements is an output grid; a smaller one a
   scalar (a reduction's result). Every grid buffer, written ones included, is an input (a
   written one turns out in-out when its outputs depend on its old values).
2. **Footprint.** Per grid shape candidate (:func:`~kernforge.apps.probe.candidate_shapes`),
   a random base state, then one impulse per input field at the grid's centre: the outputs
   that change give, per output, the taps ``(field, offset)`` it reads.
3. **Formula.** Each output at the points whose taps lie inside the grid is fitted, by least
   squares over several random runs, as a polynomial of degree 1, else 2, else 3 in its taps
   (a coefficient field enters as a product: bilinear). Negligible terms are dropped, the rest
   refitted; every point must match within the program's error bound. A field read at one
   offset only and only multiplying other fields' taps is a coefficient field.
4. **Boundary.** Per face, the layers next to it (away from the other faces) are compared
   with the rules: kept, copied from an input, zero, or the formula zero-padded or wrapped.
5. **Check.** On a fresh random run the program's oracle must reproduce every output point
   (edges and corners included), read-only buffers must come back unchanged and nothing past
   the grid may change. A scalar output must be the sum, sum of squares or max-abs of an output
   or of its change from an input, accumulated or not.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..core import ConfigError
from ..stencil.program import FaceRule, Field, Output, Reduction, StencilProgram, apply
from ..stencil.program import expr as ex
from ..stencil.program.oracle import error_bound, shift
from .lift_probe_faces import face_rules
from .lift_probe_scalars import scalar_outputs
from .lift_regions import NotLifted, is_coef
from .probe import RMAX, ProbeBuffer, Target, _decompose, candidate_shapes

FLOATS = {"float64": "fp64", "float32": "fp32", "float16": "fp16"}
SMALL = 16  # a written buffer of fewer elements is a scalar output
MAX_UNKNOWNS = 1500
Tapk = tuple[int, tuple[int, int, int]]  # (buffer parameter, offset)


@dataclass(frozen=True)
class Probed:
    """The lifted program; which parameter each field and reduction is; the grid (nx, ny, nz)."""

    program: StencilProgram
    fields: Mapping[str, int]
    reductions: Mapping[str, int]
    shape: tuple[int, int, int]
    dtype: str


class _Fail(Exception):
    def __init__(self, reason: str, definite: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.definite = reason, definite


def lift_probe(t: Target, *, seed: int = 20261207) -> Probed | NotLifted:
    """The program the kernel behind ``t`` computes, or why it is not lifted."""
    written = [b for b in t.buffers if b.written]
    if not written:
        return NotLifted("the launch wrote none of the buffers its parameters point to")
    regions = [b.region for b in t.buffers]
    if len(set(regions)) != len(regions):
        return NotLifted("two buffers lie in one allocation")
    if t.dtype is not None and t.dtype not in FLOATS:
        return NotLifted(f"the kernel's elements are {t.dtype}; floating-point grids are lifted")
    reasons = []
    dtypes = [t.dtype] if t.dtype else ["float64", "float32"]
    for dt in dtypes:
        try:
            return _Lifter(t, np.dtype(dt), seed).lift()
        except _Fail as f:
            if f.definite:
                return NotLifted(f.reason)
            reasons.append(f.reason if len(dtypes) == 1 else f"as {dt}: {f.reason}")
    return NotLifted("; ".join(reasons))


class _Lifter:
    def __init__(self, t: Target, dt: np.dtype, seed: int) -> None:
        self.t, self.dt = t, dt
        self.rng = np.random.default_rng(seed)
        self.count = {b.param: b.nbytes // dt.itemsize for b in t.buffers}
        big = max(self.count.values())
        self.scalars = [b for b in t.buffers if b.written and self.count[b.param] < min(SMALL, big)]
        self.grids = [b for b in t.buffers if b not in self.scalars]
        self.outs = [b.param for b in self.grids if b.written]
        if not self.outs:
            raise _Fail("the kernel writes only scalars", definite=True)

    # --- runs ----------------------------------------------------------------------------
    def random(self, n: int) -> dict[int, np.ndarray]:
        return {b.param: self.rng.uniform(-1, 1, n).astype(self.dt).astype(np.float64)
                for b in self.grids}

    def run(self, values: Mapping[int, np.ndarray], n: int,
            scalars: float = 0.0) -> tuple[dict[int, np.ndarray], bool]:
        """The grid buffers' first ``n`` elements and the scalars after a launch, and whether
        every element past the grid (and every read-only buffer) came back as it went in."""
        raw: dict[int, np.ndarray] = {}
        sent: dict[int, np.ndarray] = {}
        for b in self.t.buffers:
            full = np.full(self.count[b.param], scalars) if b in self.scalars else \
                np.concatenate([values[b.param], self.rng.uniform(2, 3, self.count[b.param] - n)])
            sent[b.param] = full.astype(self.dt)
            buf = np.zeros(b.nbytes, dtype=np.uint8)
            buf[:sent[b.param].nbytes] = sent[b.param].view(np.uint8)
            raw[b.param] = buf
        got = self.t.run(raw)
        out, clean = {}, True
        isz = self.dt.itemsize
        for b in self.t.buffers:
            with np.errstate(all="ignore"):
                a = got[b.param][:self.count[b.param] * isz].view(self.dt).astype(np.float64)
            s = sent[b.param].astype(np.float64)
            if b in self.scalars:
                out[b.param] = a
                continue
            out[b.param] = a[:n]
            clean &= bool(np.array_equal(a[n:], s[n:]))
            if not b.written:
                clean &= bool(np.array_equal(a, s))
        return out, clean

    # --- lifting ----------------------------------------------------------------------------
    def lift(self) -> Probed:
        with np.errstate(all="ignore"):  # another type's bytes may read as NaN or huge
            return self._lift()

    def _lift(self) -> Probed:
        n_out = min(self.count[p] for p in self.outs)
        cap = min(self.count[b.param] for b in self.grids)
        shapes = [s for s in candidate_shapes(self.t.ints, min(n_out, cap), cap)
                  if math.prod(s) <= cap]
        if not shapes:
            raise _Fail(f"no grid shape: no integer parameters multiply to at most {cap} "
                        f"elements, and {n_out} is no square or cube")
        first: _Fail | None = None
        for shape in shapes:
            try:
                return self.with_shape(shape)
            except _Fail as f:
                if f.definite:
                    raise
                if not f.reason.startswith("~"):
                    first = first or f
        raise first or _Fail("no candidate grid shape explains the response to one input "
                             "element")

    def with_shape(self, shape: tuple[int, int, int]) -> Probed:
        nx, ny, nz = shape
        n = nx * ny * nz
        dims = 3 if nz > 1 else 2 if ny > 1 else 1
        base = self.random(n)
        y0, _ = self.run(base, n)
        centre = ((nz // 2) * ny + ny // 2) * nx + nx // 2
        taps: dict[int, set[Tapk]] = {o: set() for o in self.outs}
        for b in self.grids:
            x = {p: a.copy() for p, a in base.items()}
            x[b.param][centre] += 0.5
            y, _ = self.run(x, n)
            for o in self.outs:
                d = y[o] - y0[o]
                hit = np.flatnonzero((d != 0) | np.isnan(d))
                if hit.size > (2 * RMAX + 1) ** dims:
                    raise _Fail(f"not local: {hit.size} outputs of parameter {o} depend on one "
                                f"element of parameter {b.param}")
                for q in hit:
                    off = _decompose(centre - int(q), nx, ny, nz)
                    if off is None:
                        raise _Fail("~outputs respond beyond the stencil's reach under this "
                                    "shape")
                    taps[o].add((b.param, off))
        if not any(taps.values()):
            raise _Fail("~no output changed when one input element at the grid's centre did")
        self.shape, self.n, self.dims = shape, n, dims
        names = {b.param: f"p{b.param}" for b in self.grids}
        exprs = {o: self.fit(o, sorted(taps[o]), names, base, y0) for o in self.outs}
        return self.finish(exprs, names)

    def _grid(self, a: np.ndarray) -> np.ndarray:
        nx, ny, nz = self.shape
        return a.reshape(nz, ny, nx)

    def apply(self, prog: StencilProgram, arrays: Mapping[str, np.ndarray]
              ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The oracle's outputs and error bounds, as (nz, ny, nx) arrays."""
        flat = {k: v.reshape(v.shape[3 - self.dims:]) for k, v in arrays.items()}
        res, bound = apply(prog, flat), error_bound(prog, flat)
        return ({k: self._grid(v) for k, v in res.outputs.items()},
                {k: self._grid(v) for k, v in bound.items()})

    def fit(self, o: int, tps: list[Tapk], names: Mapping[int, str],
            base: Mapping[int, np.ndarray], y0: Mapping[int, np.ndarray]) -> ex.Expr:
        """The output ``o`` as a polynomial in its taps (least squares, then pruned)."""
        reach = ex.reach(sum((ex.Tap(names[f], off) for f, off in tps), ex.Const(0.0)))
        eps = float(np.finfo(self.dt).eps)
        shape = self._grid(np.zeros(self.n)).shape
        inner = np.zeros(shape, dtype=bool)
        for deep in (RMAX, 0):  # away from the faces' layers, else as far as the taps reach
            lo = [max(reach[f"{a}-"], deep) if i >= 3 - self.dims else 0
                  for i, a in enumerate("zyx")]
            hi = [max(reach[f"{a}+"], deep) if i >= 3 - self.dims else 0
                  for i, a in enumerate("zyx")]
            inner[tuple(slice(lo[i], shape[i] - hi[i]) for i in range(3))] = True
            if inner.any():
                break
        # leave out the points a keep, zero or copy layer wider than the reach wrote
        got = self._grid(y0[o])
        for v in [0.0, *(self._grid(a) for a in base.values())]:
            inner &= got != v
        pts = int(inner.sum())
        if pts:
            for degree in (1, 2, 3):
                monos = [m for d in range(degree + 1)
                         for m in itertools.combinations_with_replacement(range(len(tps)), d)]
                if len(monos) > MAX_UNKNOWNS:
                    break
                runs = max(1, math.ceil(2 * len(monos) / pts))
                A, b, mag = self._rows(o, tps, monos, inner, runs)
                if not (np.isfinite(A).all() and np.isfinite(b).all()):
                    raise _Fail(f"the output in parameter {o} is NaN or infinite on inputs in "
                                "[-1, 1)")
                coef = _lstsq(A, b)
                keep = np.abs(coef) > min(1e3 * eps, 2e-2) * max(float(np.abs(coef).max()), 1e-300)
                coef = np.zeros_like(coef)
                if keep.any():
                    coef[keep] = _lstsq(A[:, keep], b)
                coef = coef.astype(self.dt).astype(np.float64)
                err = np.abs(A @ coef - b)
                tol = 16 * (len(tps) + 1) * degree * eps * (mag @ np.abs(coef) + np.abs(b))
                if np.all(err <= tol + 1e-300):
                    return _build(monos, coef, tps, names)
        raise _Fail(f"the output in parameter {o} is no polynomial of degree <= 3 in the "
                    f"{len(tps)} values it reads with coefficients fixed in space (a nonlinear "
                    "function, a branch on data, or coefficients that vary with the position)")

    def _rows(self, o: int, tps: list[Tapk], monos: list[tuple[int, ...]], inner: np.ndarray,
              runs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, rhs = [], []
        for _ in range(runs):
            x = self.random(self.n)
            y, _ = self.run(x, self.n)
            vals = [shift(self._grid(x[f]), off, (False, False, False))[inner] for f, off in tps]
            rows.append(np.stack([np.prod([vals[i] for i in m], axis=0) if m else
                                  np.ones(int(inner.sum())) for m in monos], axis=1))
            rhs.append(self._grid(y[o])[inner])
        A = np.concatenate(rows)
        return A, np.concatenate(rhs), np.abs(A)

    def finish(self, exprs: Mapping[int, ex.Expr], names: Mapping[int, str]) -> Probed:
        read = {t.field for e in exprs.values() for t in ex.taps(e)}
        fields = []
        for b in self.grids:
            nm = names[b.param]
            if b.written:
                fields.append(Field(nm, "inout" if nm in read else "out"))
            elif nm in read:
                fields.append(Field(nm, "coef" if is_coef(nm, list(exprs.values())) else "in"))
        outs = {names[o]: e for o, e in exprs.items()}
        x = self.random(self.n)
        y, clean = self.run(x, self.n)
        if not clean:
            raise _Fail("the kernel wrote past the grid or into a buffer it only reads")
        faces, copy = face_rules(self, outs, fields, x, y, names)
        used = {f.name for f in fields}
        prog = self.program(fields, outs, faces, copy, ())
        final = self.check(prog, used, names)
        return final

    def program(self, fields: list[Field], outs: Mapping[str, ex.Expr],
                faces: tuple[FaceRule, ...], copy: Mapping[str, str],
                reds: tuple[Reduction, ...]) -> StencilProgram:
        try:
            return StencilProgram(self.dims, FLOATS[self.dt.name], tuple(fields),
                                  tuple(Output(n, e, copy.get(n)) for n, e in outs.items()),
                                  reds, faces)
        except ConfigError as exc:
            raise _Fail(exc.message) from None

    def check(self, prog: StencilProgram, used: set[str], names: Mapping[int, str]) -> Probed:
        """The program against a fresh run, then the scalar outputs' forms."""
        param = {v: k for k, v in names.items()}
        x = self.random(self.n)
        y, _ = self.run(x, self.n)
        arrays = {nm: self._grid(x[param[nm]]) for nm in used}
        outs, bound = self.apply(prog, arrays)
        for o in prog.outputs:
            got = self._grid(y[param[o.field]])
            bad = ~(np.abs(got - outs[o.field]) <= 8 * bound[o.field])
            if bad.any():
                z, yy, xx = (int(v) for v in np.argwhere(bad)[0])
                raise _Fail(f"{o.field} differs from the lifted program at (z={z}, y={yy}, "
                            f"x={xx}): the edges or corners follow no per-face rule")
        
        reds = scalar_outputs(self, prog, {k: v.reshape(v.shape[3 - self.dims:])
                                           for k, v in arrays.items()}, param)
        final = self.program(list(prog.fields), {o.field: o.expr for o in prog.outputs},
                             prog.faces, {o.field: o.copy_from for o in prog.outputs
                                          if o.copy_from}, reds)
        fields = {f.name: param[f.name] for f in final.fields}
        return Probed(final, fields, {r.name: int(r.name[1:]) for r in reds}, self.shape,
                      self.dt.name)


def _lstsq(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(A, b, rcond=None)[0]


def _build(monos: list[tuple[int, ...]], coef: np.ndarray, tps: list[Tapk],
           names: Mapping[int, str]) -> ex.Expr:
    out: ex.Expr | None = None
    for m, c in zip(monos, coef, strict=True):
        if c == 0:
            continue
        term: ex.Expr | None = None
        for i in m:
            f, off = tps[i]
            t = ex.Tap(names[f], off)
            term = t if term is None else ex.Bin("*", term, t)
        term = ex.Const(float(c)) if term is None else \
            term if c == 1 else ex.Bin("*", ex.Const(float(c)), term)
        out = term if out is None else ex.Bin("+", out, term)
    return out if out is not None else ex.Const(0.0)


__all__ = ["ProbeBuffer", "Probed", "lift_probe"]
