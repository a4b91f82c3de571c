"""From the stores a kernel's body makes (:mod:`.lift_source`) to a stencil program.

The point a thread writes is the index of its stores, ``x + SY*y + SZ*z`` over its coordinates
(global thread indices, their quotients and remainders, loop variables that walk an axis);
every read's index minus it must be a fixed offset ``dx + SY*dy + SZ*dz``. The grid's extents
are the strides (x: ``SY``; y: ``SZ/SY``) and, for the last axis, the bound a guard or a
wrap-around puts on it. Guards are evaluated on a concrete grid (two sets of parameter values):
the points whose winning store is the formula must form a box, and the layers around it follow a
keep, copy or zero rule per face; reads guarded by a bound check are zero-padded, wrapped reads
periodic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import ConfigError
from ..stencil.program import FACES, FaceRule, Field, Output, Reduction, StencilProgram
from ..stencil.program import expr as ex
from .lift_fields import is_coef, new_values, rename_components
from .lift_points import box_widths, point_shifts
from .lift_symbolic import (
    MAX_WIDTH,
    Grid,
    Lin,
    Poly,
    Pred,
    Read,
    Symbols,
    Unliftable,
    last_extent,
    normalize,
    quotient,
    samples,
)


@dataclass(frozen=True)
class Store:
    ptr: str
    param: int
    index: Lin
    value: ex.Expr
    guard: Pred
    atomic: bool = False


@dataclass(frozen=True)
class Lifted:
    """The program, which kernel parameter each field and reduction is, and the grid's extents
    (x first) as expressions over the integer parameters; a field that is the k-th grid of its
    buffer (k >= 1: it starts k grids in); buffers read at fixed elements (coefficient tables,
    in the program as ``ConstMem`` arrays of the buffer's name)."""

    program: StencilProgram
    fields: Mapping[str, int]
    reductions: Mapping[str, int]
    extents: tuple[str, ...]
    sizes: Mapping[str, int]  # integer parameter name -> index
    components: Mapping[str, int] = field(default_factory=dict)  # field -> k: k grids in
    tables: Mapping[str, int] = field(default_factory=dict)  # ConstMem name -> its buffer


@dataclass(frozen=True)
class NotLifted:
    reason: str


def build(stores: list[Store], params: Mapping[str, tuple[int, str]], syms: Symbols,
          precision: str) -> Lifted | NotLifted:
    grid_stores = [s for s in stores if not s.atomic]
    for s in stores:
        if s.atomic and syms.expand(normalize(s.index.poly)) != Poly():
            raise Unliftable(f"atomicAdd into {s.ptr} at a varying index (a scatter or a "
                             "histogram)")
    if not grid_stores:
        raise Unliftable("the kernel stores into no grid")
    E = syms.expand(normalize(grid_stores[0].index.poly))
    for s in grid_stores:
        e = syms.expand(normalize(s.index.poly))
        if e != E or s.index.wraps or s.index.clamps:
            raise Unliftable(f"stores at different points of a thread ({E.text()} and "
                             f"{e.text()}): a scatter, or several points per thread")
    coords = sorted(E.symbols() - {s for s in E.symbols() if s.startswith("$")})
    raw = [c for c in coords if c.split(".")[0] in ("tid", "bid", "bdim")]
    if raw:
        raise Unliftable(f"the written index {E.text()} is not blockIdx*blockDim+threadIdx "
                         f"based ({', '.join(raw)})")
    if not coords or len(coords) > 3 or E.degree_in(coords) != 1:
        raise Unliftable(f"the written index {E.text()} is no grid point")
    stride = {c: E.coefficient(c) for c in coords}
    xs = [c for c in coords if stride[c] == Poly.const(1)]
    if len(xs) != 1:
        raise Unliftable(f"the written index {E.text()} has no axis of stride 1")
    offset = E - sum((Poly.sym(c) * stride[c] for c in coords), Poly())
    sample_sets = samples(params)
    rest = sorted((c for c in coords if c != xs[0]),
                  key=lambda c: int(stride[c].value(sample_sets[0].__getitem__)))
    coords = xs + rest
    strides = [stride[c] for c in coords]
    shifts = point_shifts(offset, coords, strides, sample_sets[0])
    wraps = {w for s in stores for r in _reads(s.value) for w in r.index.wraps}
    last, last_poly = last_extent(syms, coords, strides, [s.guard for s in grid_stores], wraps,
                                  sample_sets, shifts)
    grids = [Grid(syms, coords, strides, last, s, shifts) for s in sample_sets]
    texts = [strides[1].text()] if len(coords) > 1 else []
    if len(coords) > 2:
        texts.append(quotient(strides[2], strides[1]))
    extents = tuple(texts[:len(coords) - 1]) + (last_poly.text(),)
    syms.points = strides[-1] * last_poly
    dims = len(coords)
    outputs, faces, copy = _outputs(grid_stores, E, grids, syms, coords, strides, wraps, dims)
    computed = outputs.pop("__computed__")
    reds = _reductions([s for s in stores if s.atomic], E, grids[0], syms, strides, coords,
                       computed, outputs)
    parts = {tuple(t.field.split("#")) for o in outputs.values() for t in ex.taps(o)
             if "#" in t.field}
    parts |= {tuple(t.field.split("#")) for r in reds for t in ex.taps(r.expr) if "#" in t.field}
    several = {ptr for ptr, k in parts if k != "0"}
    component = {(f"{ptr}_{k}" if ptr in several else ptr): (ptr, int(k)) for ptr, k in parts}
    outputs = {n: rename_components(e, several) for n, e in outputs.items()}
    reds = [Reduction(r.name, r.op, rename_components(r.expr, several), r.accumulate, r.over)
            for r in reds]
    copy = {n: f"{c}_0" if c in several else c for n, c in copy.items()}
    written = {s.ptr: s.param for s in grid_stores}
    read = {t.field for o in outputs.values() for t in ex.taps(o)} | \
        {t.field for r in reds for t in ex.taps(r.expr)}
    fields = []
    pidx = {n: i for n, (i, _) in params.items()}
    pidx.update({n: pidx[ptr] for n, (ptr, _) in component.items()})
    for name in sorted(set(written) | read, key=lambda n: (pidx[n], n)):
        if name in written:
            role = "inout" if any(t.field == name for o in outputs.values()
                                  for t in ex.taps(o)) else "out"
        else:
            role = "coef" if is_coef(name, list(outputs.values())) else "in"
        fields.append(Field(name, role))
    try:
        prog = StencilProgram(dims, precision, tuple(fields),
                              tuple(Output(n, e, copy.get(n)) for n, e in outputs.items()),
                              tuple(reds), faces)
    except ConfigError as exc:
        return NotLifted(exc.message)
    atomics = {s.ptr: s.param for s in stores if s.atomic}
    return Lifted(prog, {f.name: pidx[f.name] for f in fields}, atomics, extents,
                  {n: i for n, (i, k) in params.items() if k == "int"},
                  {n: k for n, (_, k) in component.items() if k}, dict(syms.tables))


def _reads(e: ex.Expr) -> list[Read]:
    return [n for n in ex.walk(e) if isinstance(n, Read)]


def _outputs(stores: list[Store], E: Poly, grids: list[Grid], syms: Symbols,
             coords: list[str], strides: list[Poly], wraps: set[tuple[str, Poly]], dims: int
             ) -> tuple[dict[str, Any], tuple[FaceRule, ...], dict[str, str]]:
    g = grids[0]
    shape = g.shape
    periodic = {coords.index(s) for s, _ in wraps if s in coords}
    for sym, m in wraps:
        if sym not in coords:
            raise Unliftable(f"a wrap-around on {sym}, which is no axis of the written point")
        a = coords.index(sym)
        for gr in grids:
            if int(m.value(gr.sample.__getitem__)) != gr.ext[a]:
                raise Unliftable(f"axis {sym} wraps modulo {m.text()}, not its extent")
    by_field: dict[str, list[Store]] = {}
    for s in stores:
        by_field.setdefault(s.ptr, []).append(s)
    outputs: dict[str, Any] = {}
    computed_all = np.ones(shape, dtype=bool)
    others = [np.ones(gr.shape, dtype=bool) for gr in grids[1:]]  # the same at other sizes
    kinds_all: dict[str, np.ndarray] = {}
    edges: dict[str, set[str]] = {}
    for name, sts in by_field.items():
        winner = np.full(shape, -1)
        for i, s in enumerate(sts):
            winner[g.mask(s.guard)] = i
        kinds = [_kind(s, name, E, syms) for s in sts]
        mains = {i for i, k in enumerate(kinds) if k == "main"}
        if not mains and len(set(kinds)) == 1 and kinds[0] != "keep":
            mains = set(range(len(sts)))  # a copy (u = u_new) or a clearing kernel
        if not mains:
            raise Unliftable(f"{name} is never computed: only copied, zeroed or kept, in "
                             "different places")
        exprs = {_taps(sts[i].value, E, grids, syms, strides, coords) for i in mains}
        if len(exprs) > 1:
            raise Unliftable(f"{name} is computed by different formulas in different regions")
        outputs[name] = exprs.pop()
        computed = np.isin(winner, list(mains))
        computed_all &= computed
        kinds_all[name] = np.array(["keep" if w < 0 else kinds[w] for w in winner.reshape(-1)]
                                   ).reshape(shape)
        for i in mains:
            _check_reads(sts[i].value, E, g, syms, strides, coords, computed, periodic, name,
                         edges)
        for gr, other in zip(grids[1:], others, strict=True):
            w2 = np.full(gr.shape, -1)
            for i, s in enumerate(sts):
                w2[gr.mask(s.guard)] = i
            other &= np.isin(w2, list(mains))
            for i in mains:  # reads and their guards at other sizes too
                _check_reads(sts[i].value, E, gr, syms, strides, coords,
                             np.isin(w2, list(mains)), periodic, name, {})
    widths = box_widths(computed_all)
    for other in others:
        if box_widths(other) != widths:
            odd = next(f for f, w in box_widths(other).items() if w != widths[f])
            raise Unliftable(f"the layers the kernel leaves at face {odd} are {widths[odd]} at "
                             f"one size and {box_widths(other)[odd]} at another: a guard bounds "
                             "an axis by another axis' extent (right only for some sizes)")
    faces, copy = _faces(widths, kinds_all, shape, outputs, periodic, edges)
    outputs["__computed__"] = computed_all
    return outputs, faces, copy


def _kind(s: Store, name: str, E: Poly, syms: Symbols) -> str:
    v = s.value
    if isinstance(v, ex.Const) and v.value == 0:
        return "zero"
    if isinstance(v, Read) and v.guard == Pred("true") and not v.index.wraps and \
            syms.expand(normalize(v.index.poly)) == E:
        return "keep" if v.ptr == name else f"copy:{v.ptr}"
    return "main"


def _offset(r: Read, E: Poly, grids: list[Grid], syms: Symbols, strides: list[Poly],
            coords: list[str]) -> tuple[int, tuple[int, int, int]]:
    """(component, (dz, dy, dx)) of a read: ``index - point = k * points + offset``."""
    D = syms.expand(normalize(r.index.poly)) - E
    if D.symbols() - {s for s in D.symbols() if s.startswith("$")}:
        raise Unliftable(f"{r.ptr} is read at {D.text()} from the written point: not a fixed "
                         "offset")
    g = grids[0]
    for k in range(9):  # a buffer may hold several grids, one after another
        rest = D - syms.points * Poly.const(k)
        d = int(rest.value(g.sample.__getitem__))
        off = [0, 0, 0]  # x, y, z
        for a in reversed(range(1, len(coords))):
            off[a] = round(d / g.strides[a])
            d -= off[a] * g.strides[a]
        off[0] = d
        want = Poly.const(off[0]) + sum((strides[a] * Poly.const(off[a])
                                         for a in range(1, len(coords))), Poly())
        if want == rest and max(abs(v) for v in off) <= MAX_WIDTH:
            return k, (off[2], off[1], off[0])
    raise Unliftable(f"{r.ptr} is read at {D.text()} from the written point: no small "
                     "offset along the axes")


def _taps(e: ex.Expr, E: Poly, grids: list[Grid], syms: Symbols, strides: list[Poly],
          coords: list[str]) -> ex.Expr:
    if isinstance(e, Read):
        fixed = syms.expand(normalize(e.index.poly)).constant()
        if fixed is not None:  # a coefficient table: the same element at every point
            syms.tables[e.ptr] = e.param
            return ex.ConstMem(e.ptr, fixed, True)
        k, off = _offset(e, E, grids, syms, strides, coords)
        return ex.Tap(f"{e.ptr}#{k}", off)
    if isinstance(e, ex.Bin):
        return ex.Bin(e.op, _taps(e.a, E, grids, syms, strides, coords),
                      _taps(e.b, E, grids, syms, strides, coords))
    if isinstance(e, ex.Neg):
        return ex.Neg(_taps(e.a, E, grids, syms, strides, coords))
    return e


def _check_reads(e: ex.Expr, E: Poly, g: Grid, syms: Symbols, strides: list[Poly],
                 coords: list[str], computed: np.ndarray, periodic: set[int], name: str,
                 edges: dict[str, set[str]]) -> None:
    """Every read of a formula inside the grid at the points computed, or zero-padded by a
    bound check, clamped to the grid or wrapped; ``edges``: face -> how reads past it go."""
    nd = len(coords)
    idx = np.indices(g.shape)
    for r in _reads(e):
        if syms.expand(normalize(r.index.poly)).constant() is not None:
            continue
        off = _offset(r, E, [g], syms, strides, coords)[1][3 - nd:]
        inside = np.ones(g.shape, dtype=bool)
        for k, d in enumerate(off):
            a = nd - 1 - k
            face = f"{'xyz'[a]}{'+' if d > 0 else '-'}"
            if a in periodic and any(s == coords[a] for s, _ in r.index.wraps):
                continue
            clamps = [c for c in r.index.clamps if c[0] == coords[a]]
            if clamps:
                for _, cond, A, B in clamps:
                    va = np.broadcast_to(A.value(g.env), g.shape)
                    got = np.where(g.mask(cond), va, np.broadcast_to(B.value(g.env), g.shape))
                    if not np.array_equal(got[computed], np.clip(va, 0, g.ext[a] - 1)[computed]):
                        raise Unliftable(f"{name}: a conditional index of {r.ptr} that does "
                                         "not clamp it to the grid")
                if d:
                    edges.setdefault(face, set()).add("clamp")
                continue
            out = ~((idx[k] + d >= 0) & (idx[k] + d < g.shape[k]))
            if d and (out & computed).any() and r.guard != Pred("true"):
                edges.setdefault(face, set()).add("zeropad")
            inside &= ~out
        guard = g.mask(r.guard)
        if r.guard != Pred("true"):
            if not np.array_equal(guard[computed], inside[computed]):
                raise Unliftable(f"{name}: a conditional read of {r.ptr} whose condition is "
                                 "not the bound check of its offset")
        elif not inside[computed].all():
            raise Unliftable(f"{name}: {r.ptr} read at offset {off} outside the grid, with "
                             "no guard (a padded array, or a launch that skips the boundary)")


def _faces(widths: dict[str, int], kinds: dict[str, np.ndarray], shape: tuple[int, ...],
           outputs: dict[str, Any], periodic: set[int], edges: dict[str, set[str]]
           ) -> tuple[tuple[FaceRule, ...], dict[str, str]]:
    nd = len(shape)
    taken = np.zeros(shape, dtype=bool)
    rules: list[FaceRule] = []
    copy: dict[str, str] = {}
    for face in FACES:
        k = "zyx".index(face[0])
        a = 2 - k  # x=0, y=1, z=2
        w = widths[face]
        if a >= nd:
            rules.append(FaceRule("keep", 0))
            continue
        if w == 0:
            crossing = any(ex.reach(e)[face] for e in outputs.values())
            how = edges.get(face, set())
            if len(how) > 1:
                raise Unliftable(f"reads past face {face} are both {' and '.join(sorted(how))}")
            rule = "periodic" if a in periodic else how.pop() if how else \
                "zeropad" if crossing else "keep"
            rules.append(FaceRule(rule, 0 if rule == "keep" else None))
            continue
        if a in periodic:
            raise Unliftable(f"axis {'xyz'[a]} wraps but its face {face} is not computed")
        sl = [slice(None)] * nd
        ax = nd - 1 - a
        sl[ax] = slice(0, w) if face[1] == "-" else slice(shape[ax] - w, shape[ax])
        m = np.zeros(shape, dtype=bool)
        m[tuple(sl)] = True
        own = m & ~taken
        taken |= m
        seen = {kd for arr in kinds.values() for kd in np.unique(arr[own])}
        per = {n: set(np.unique(arr[own])) for n, arr in kinds.items()}
        if any(len(v) > 1 for v in per.values()):
            raise Unliftable(f"the points along face {face} are written in different ways "
                             f"({', '.join(sorted(map(str, seen)))})")
        found = {next(iter(v)) if v else "keep" for v in per.values()}
        if len(found) > 1 and not all(f.startswith("copy") for f in found):
            raise Unliftable(f"the outputs follow different rules at face {face}: "
                             f"{', '.join(sorted(map(str, found)))}")
        rule = next(iter(found)) if found else "keep"
        if rule.startswith("copy:"):
            for n, v in per.items():
                src = next(iter(v)).split(":", 1)[1]
                if copy.setdefault(n, src) != src:
                    raise Unliftable(f"{n} copies {copy[n]} at one face and {src} at another")
            rule = "copy"
        rules.append(FaceRule(rule, w))
    return tuple(rules), copy


def _reductions(stores: list[Store], E: Poly, g: Grid, syms: Symbols, strides: list[Poly],
                coords: list[str], computed: np.ndarray, outputs: Mapping[str, ex.Expr]
                ) -> list[Reduction]:
    out = []
    for s in stores:
        where = g.mask(s.guard)
        over = "computed" if np.array_equal(where, computed) else "all" if where.all() \
            else None
        if over is None:
            raise Unliftable(f"the sum into {s.ptr} runs over points other than those the "
                             "kernel computes")
        e = new_values(_taps(s.value, E, [g], syms, strides, coords), outputs)
        if isinstance(e, ex.Bin) and e.op == "*" and e.a == e.b:
            out.append(Reduction(s.ptr, "sumsq", e.a, True, over))
        else:
            out.append(Reduction(s.ptr, "sum", e, True, over))
    return out
