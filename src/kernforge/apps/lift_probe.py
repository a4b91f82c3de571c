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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from ..core import ConfigError
from ..stencil.program import FaceRule, Field, Output, Reduction, StencilProgram
from ..stencil.program import expr as ex
from .lift_fields import is_coef
from .lift_probe_derived import footprint_shapes, product, products, real_terms, refit, snapped
from .lift_probe_derived import lstsq as _lstsq
from .lift_probe_faces import face_rules, verify
from .lift_probe_scalars import scalar_outputs
from .lift_probe_shapes import likely_types, magnitudes, padded_shapes
from .lift_regions import NotLifted
from .probe import RMAX, UNCHANGED, ProbeBuffer, Target, _decompose, candidate_shapes

FLOATS = {"float64": "fp64", "float32": "fp32", "float16": "fp16"}
SMALL = 16  # a written buffer of fewer elements is a scalar output
MAX_UNKNOWNS = 1500
MAX_COMPONENTS = 9  # grids one read-only buffer may hold, one after another
MAX_ROWS = 20000  # points of one run a fit uses at most
Offset = tuple[int, int, int]


@dataclass(frozen=True)
class Probed:
    """The lifted program; which parameter each field and reduction is (and at which element
    of its buffer a field starts: a padded grid or a later component starts past the pointer);
    the grid (nx, ny, nz); the read-only buffers of fewer than 16 elements (coefficient tables,
    left as recorded: the program's numbers came from them)."""

    program: StencilProgram
    fields: Mapping[str, int]
    reductions: Mapping[str, int]
    shape: tuple[int, int, int]
    dtype: str
    offsets: Mapping[str, int]
    tables: Mapping[int, tuple[float, ...]]


class _Fail(Exception):
    def __init__(self, reason: str, definite: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.definite = reason, definite


def lift_probe(t: Target, *, seed: int = 20261207) -> Probed | NotLifted:
    """The program the kernel behind ``t`` computes, or why it is not lifted."""
    written = [b for b in t.buffers if b.written]
    if not written:
        return NotLifted(UNCHANGED)
    for region in {b.region for b in t.buffers}:
        group = [b for b in t.buffers if b.region == region]
        if len(group) > 1 and any(b.written for b in group):
            return NotLifted(f"parameters {', '.join(str(b.param) for b in group)} point into "
                             "one allocation, and the kernel writes it")
    if t.dtype is not None and t.dtype not in FLOATS:
        return NotLifted(f"the kernel's elements are {t.dtype}; floating-point grids are lifted")
    reasons = []
    dtypes = [t.dtype] if t.dtype else likely_types(t)
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
        # pointers into one allocation: the lowest one's view holds the others' (components)
        self.bufs = [b for b in t.buffers if not any(
            o.region == b.region and o.nbytes > b.nbytes for o in t.buffers)]
        self.count = {b.param: b.nbytes // dt.itemsize for b in self.bufs}
        big = max(self.count.values())
        small = [b for b in self.bufs if self.count[b.param] < min(SMALL, big)]
        self.scalars = [b for b in small if b.written]
        self.tables = [b for b in small if not b.written]  # left as recorded: coefficients
        self.grids = [b for b in self.bufs if b not in small]
        self.outs = [b.param for b in self.grids if b.written]
        if not self.outs:
            raise _Fail("the kernel writes only scalars", definite=True)
        # the recorded contents' magnitudes: fresh values are drawn at them (see magnitudes)
        self.scale = magnitudes(t, [b.param for b in self.grids], dt)
        self.n = 0
        self.fields: dict[str, tuple[int, int]] = {}  # name -> (parameter, component)
        self._tails: dict[tuple[int, int, bool], np.ndarray] = {}
        self.origin = 0  # elements from each grid buffer's pointer to its grid

    # --- runs ----------------------------------------------------------------------------
    def span(self, b: ProbeBuffer) -> int:
        """How many elements of ``b`` the probe sets: one grid, or several (components, one
        after another) for a read-only buffer a whole number of grids long when the output
        grids hold one."""
        c, n = self.count[b.param] - self.origin, self.n
        outs = min(self.count[o] for o in self.outs) - self.origin
        several = not b.written and c % n == 0 and outs < 2 * n
        return min(MAX_COMPONENTS, c // n) * n if several else n

    def tail(self, b: ProbeBuffer, head: bool = False) -> np.ndarray:
        """What the elements before (``head``) and past the probed ones hold: the same in every
        run (a kernel that reads them must not look like one whose outputs move on their
        own)."""
        m = self.origin if head else self.count[b.param] - self.origin - self.span(b)
        key = (b.param, m, head)
        if key not in self._tails:
            self._tails[key] = np.random.default_rng([b.param, head]).uniform(2, 3, m)
        return self._tails[key]

    def random(self, unit: bool = False) -> dict[int, np.ndarray]:
        """Fresh values for every grid buffer, uniform in +-its recorded magnitude (in [-1, 1)
        when ``unit``)."""
        return {b.param: (self.rng.uniform(-1, 1, self.span(b)) *
                          (1.0 if unit else self.scale[b.param])
                          ).astype(self.dt).astype(np.float64) for b in self.grids}

    def grid(self, x: Mapping[int, np.ndarray], name: str) -> np.ndarray:
        """Field ``name`` of a run's values, as (nz, ny, nx)."""
        p, k = self.fields[name]
        nx, ny, nz = self.shape
        return x[p][k * self.n:(k + 1) * self.n].reshape(nz, ny, nx)

    def run(self, values: Mapping[int, np.ndarray],
            scalars: float = 0.0) -> tuple[dict[int, np.ndarray], bool]:
        """The grid buffers' probed elements and the scalars after a launch, and whether every
        element past them (and every read-only buffer) came back as it went in."""
        raw: dict[int, np.ndarray] = {}
        sent: dict[int, np.ndarray] = {}
        for b in self.bufs:
            if b in self.tables:
                continue
            full = np.full(self.count[b.param], scalars) if b in self.scalars else \
                np.concatenate([self.tail(b, head=True), values[b.param], self.tail(b)])
            sent[b.param] = full.astype(self.dt)
            buf = np.zeros(b.nbytes, dtype=np.uint8)
            buf[:sent[b.param].nbytes] = sent[b.param].view(np.uint8)
            raw[b.param] = buf
        got = self.t.run(raw)
        out, clean = {}, True
        isz = self.dt.itemsize
        for b in self.bufs:
            with np.errstate(all="ignore"):
                a = got[b.param][:self.count[b.param] * isz].view(self.dt).astype(np.float64)
            if b in self.tables:
                out[b.param] = a
                continue
            s = sent[b.param].astype(np.float64)
            if b in self.scalars:
                out[b.param] = a
                continue
            o, m = self.origin, self.span(b)
            out[b.param] = a[o:o + m]
            clean &= bool(np.array_equal(a[o + m:], s[o + m:]) and np.array_equal(a[:o], s[:o]))
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
        plain = [(s, 0) for s in candidate_shapes(self.t.ints, min(n_out, cap), cap)
                 if math.prod(s) <= cap]
        exact = [c for c in plain if math.prod(c[0]) == n_out]
        shapes = exact + padded_shapes(self.t.ints, n_out, cap) + [c for c in plain if c not in exact]
        if not shapes:
            raise _Fail(f"no grid shape: no integer parameters multiply to at most {cap} "
                        f"elements, and {n_out} is no square or cube")
        first: _Fail | None = None

        def derived() -> Iterator[tuple[tuple[int, int, int], int]]:
            """Then extents no parameter gives, from the response's strides (rtm8's macros):
            a grid as large as every grid buffer."""
            found = footprint_shapes(self, n_out) if n_out == cap else []
            yield from ((s, 0) for s in found if (s, 0) not in shapes)
        for shape, origin in itertools.chain(shapes[:24], derived()):
            self.origin = origin
            try:
                return self.with_shape(shape)
            except _Fail as f:
                if f.definite:
                    raise
                if not f.reason.startswith("~"):
                    first = first or f
        if first is None:  # no output responded under any shape: do they respond at all?
            y1, y2 = self.run(self.random())[0], self.run(self.random())[0]
            if all(np.array_equal(y1[o], y2[o]) for o in self.outs):
                raise _Fail("the outputs are the same whatever the inputs hold (a fill, as "
                            "heat's 'zero'): no stencil to lift", definite=True)
        raise first or _Fail("no candidate grid shape explains the response to one input "
                             "element")

    def with_shape(self, shape: tuple[int, int, int]) -> Probed:
        nx, ny, nz = shape
        self.shape, self.n = shape, nx * ny * nz
        self.dims = dims = 3 if nz > 1 else 2 if ny > 1 else 1
        self.fields = {}
        for b in self.grids:
            k = self.span(b) // self.n
            for c in range(k):
                self.fields[f"p{b.param}" if k == 1 else f"p{b.param}_{c}"] = (b.param, c)
        base = self.random()
        y0, _ = self.run(base)
        centre = ((nz // 2) * ny + ny // 2) * nx + nx // 2
        names = {b.param: f"p{b.param}" for b in self.grids if b.written}
        taps: dict[str, set[tuple[str, Offset]]] = {names[o]: set() for o in self.outs}
        for f, (p, c) in self.fields.items():
            x = {q: a.copy() for q, a in base.items()}
            x[p][c * self.n + centre] += 0.5 * self.scale[p]
            y, _ = self.run(x)
            for o in self.outs:
                d = y[o] - y0[o]
                hit = np.flatnonzero((d != 0) | np.isnan(d))
                if hit.size > (2 * RMAX + 1) ** dims:
                    raise _Fail(f"not local: {hit.size} outputs of parameter {o} depend on one "
                                f"element of {f}")
                for q in hit:
                    off = _decompose(centre - int(q), nx, ny, nz)
                    if off is None:
                        raise _Fail("~outputs respond beyond the stencil's reach under this "
                                    "shape")
                    taps[names[o]].add((f, off))
        if not any(taps.values()):
            raise _Fail("~no output changed when one input element at the grid's centre did")
        prods = products(self, list(taps), base, y0)
        exprs = {o: self.fit(o, sorted(t), base, y0) for o, t in taps.items() if o not in prods}
        exprs |= {o: product(exprs, pair) for o, pair in prods.items()}
        return self.finish({o: exprs[o] for o in taps})

    def fit(self, o: str, tps: list[tuple[str, Offset]], base: Mapping[int, np.ndarray],
            y0: Mapping[int, np.ndarray]) -> ex.Expr:
        """The output ``o`` as a polynomial in its taps (least squares, then pruned)."""
        reach = ex.reach(sum((ex.Tap(f, off) for f, off in tps), ex.Const(0.0)))
        eps = float(np.finfo(self.dt).eps)
        got = self.grid(y0, o)
        inner = np.zeros(got.shape, dtype=bool)
        for deep in (RMAX, 0):  # away from the faces' layers, else as far as the taps reach
            lo = [max(reach[f"{a}-"], deep) if i >= 3 - self.dims else 0
                  for i, a in enumerate("zyx")]
            hi = [max(reach[f"{a}+"], deep) if i >= 3 - self.dims else 0
                  for i, a in enumerate("zyx")]
            inner[tuple(slice(lo[i], got.shape[i] - hi[i]) for i in range(3))] = True
            if inner.any():
                break
        # leave out the points a keep, zero or copy layer wider than the reach wrote; where
        # that leaves none, the output is a copy everywhere (burger's update: u = u_new)
        whole = inner.copy()
        for v in [0.0, *(self.grid(base, f) for f in self.fields)]:
            inner &= got != v
        inner = inner if inner.any() else whole
        where = np.nonzero(inner)
        if where[0].size > MAX_ROWS:  # a large grid: a sample of its points is enough
            pick = np.sort(np.random.default_rng(0).choice(where[0].size, MAX_ROWS,
                                                           replace=False))
            where = tuple(w[pick] for w in where)
        pts = int(where[0].size)
        if pts:
            for degree in (1, 2, 3):
                monos = [m for d in range(degree + 1)
                         for m in itertools.combinations_with_replacement(range(len(tps)), d)]
                if len(monos) > MAX_UNKNOWNS:
                    break
                runs = max(1, math.ceil(2 * len(monos) / pts))
                A, b, mag = self._rows(o, tps, monos, where, runs)
                if not (np.isfinite(A).all() and np.isfinite(b).all()):
                    raise _Fail(f"{o} is NaN or infinite on inputs in [-1, 1)")
                keep = real_terms(A, b, _lstsq(A, b), mag.max(axis=0), eps)
                coef = np.zeros(A.shape[1])
                if keep.any():
                    coef[keep] = _lstsq(A[:, keep], b)
                coef = snapped(coef.astype(self.dt).astype(np.float64), A, b, self.dt)
                err = np.abs(A @ coef - b)
                k = 16 * (len(tps) + 1) * degree * eps
                if np.all(err <= k * (mag @ np.abs(coef) + np.abs(b)) + 1e-300):
                    if set(self.scale.values()) != {1.0} and keep.any():  # and in [-1, 1)
                        unit = self._rows(o, tps, monos, where, runs, unit=True)[:2]
                        coef = refit(coef, keep, (A, b), unit, k, self.dt)
                    return _build(monos, coef, tps)
        raise _Fail(f"the output {o} is no polynomial of degree <= 3 in the {len(tps)} values "
                    "it reads with coefficients fixed in space (a nonlinear function, a branch "
                    "on data, or coefficients that vary with the position)")

    def _rows(self, o: str, tps: list[tuple[str, Offset]], monos: list[tuple[int, ...]],
              where: tuple[np.ndarray, ...], runs: int, unit: bool = False
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per run and point (``where``: z, y, x indices, each point's taps inside the grid),
        every monomial's value and the output's (inputs in [-1, 1) when ``unit``)."""
        rows, rhs = [], []
        z, yy, xx = where
        for _ in range(runs):
            x = self.random(unit)
            y, _ = self.run(x)
            vals = [self.grid(x, f)[z + off[0], yy + off[1], xx + off[2]] for f, off in tps]
            rows.append(np.stack([np.prod([vals[i] for i in m], axis=0) if m else
                                  np.ones(z.size) for m in monos], axis=1))
            rhs.append(self.grid(y, o)[where])
        A = np.concatenate(rows)
        return A, np.concatenate(rhs), np.abs(A)

    def finish(self, exprs: Mapping[str, ex.Expr]) -> Probed:
        read = {t.field for e in exprs.values() for t in ex.taps(e)}
        fields = []
        for name in self.fields:
            if name in exprs:
                fields.append(Field(name, "inout" if name in read else "out"))
            elif name in read:
                fields.append(Field(name, "coef" if is_coef(name, list(exprs.values()))
                                    else "in"))
        x = self.random()
        y, clean = self.run(x)
        if not clean:
            raise _Fail("the kernel wrote past the grid or into a buffer it only reads")
        faces, copy = face_rules(self, exprs, fields, x, y)
        prog = self.program(fields, exprs, faces, copy, ())
        return self.check(prog, {f.name for f in fields}, y)

    def program(self, fields: list[Field], outs: Mapping[str, ex.Expr],
                faces: tuple[FaceRule, ...], copy: Mapping[str, str],
                reds: tuple[Reduction, ...]) -> StencilProgram:
        try:
            return StencilProgram(self.dims, FLOATS[self.dt.name], tuple(fields),
                                  tuple(Output(n, e, copy.get(n)) for n, e in outs.items()),
                                  reds, faces)
        except ConfigError as exc:
            raise _Fail(exc.message) from None

    def check(self, prog: StencilProgram, used: set[str], last: Mapping[int, np.ndarray]
              ) -> Probed:
        """The program against fresh runs (values at the recorded magnitudes, and in [-1, 1)
        when those differ), then the scalar outputs' forms."""
        for unit in (False, True) if set(self.scale.values()) != {1.0} else (False,):
            verify(self, prog, used, unit)
        reds = scalar_outputs(self, prog, used)
        final = self.program(list(prog.fields), {o.field: o.expr for o in prog.outputs},
                             prog.faces, {o.field: o.copy_from for o in prog.outputs
                                          if o.copy_from}, reds)
        fields = {f.name: self.fields[f.name][0] for f in final.fields}
        offsets = {f.name: self.origin + self.fields[f.name][1] * self.n for f in final.fields}
        tables = {b.param: tuple(float(v) for v in last[b.param]) for b in self.tables}
        return Probed(final, fields, {r.name: int(r.name[1:]) for r in reds}, self.shape,
                      self.dt.name, offsets, tables)


def _build(monos: list[tuple[int, ...]], coef: np.ndarray,
           tps: list[tuple[str, Offset]]) -> ex.Expr:
    out: ex.Expr | None = None
    for m, c in zip(monos, coef, strict=True):
        if c == 0:
            continue
        term: ex.Expr | None = None
        for i in m:
            f, off = tps[i]
            t = ex.Tap(f, off)
            term = t if term is None else ex.Bin("*", term, t)
        term = ex.Const(float(c)) if term is None else \
            term if c == 1 else ex.Bin("*", ex.Const(float(c)), term)
        out = term if out is None else ex.Bin("+", out, term)
    return out if out is not None else ex.Const(0.0)


__all__ = ["ProbeBuffer", "Probed", "lift_probe"]
