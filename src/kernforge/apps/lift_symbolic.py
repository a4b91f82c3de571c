"""The symbolic values source lifting computes with (:mod:`.lift_source`): integer polynomials
for indices, predicates for guards, and reads of kernel buffers inside program expressions.

Index symbols: ``tid.x``, ``bid.x``, ``bdim.x`` (threadIdx, blockIdx, blockDim), ``gx`` (the
global thread index ``blockIdx.x*blockDim.x + threadIdx.x``, recognized after the fact), ``$n``
(the integer kernel parameter ``n``), ``k@3`` (a loop variable) and the results of ``a % m``
and ``a / m`` on a symbol ``a`` (``a%m``, ``a/m``: together they are ``a``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..stencil.program import expr as ex

Mono = tuple[str, ...]
MAX_WIDTH = 8  # the widest boundary layer (and farthest tap) lifting accepts


class Unliftable(Exception):
    """Why a kernel is not lifted (raised inside the lifter, returned as a refusal)."""


@dataclass(frozen=True)
class Poly:
    """A polynomial with integer coefficients over index symbols (hashable)."""

    terms: tuple[tuple[Mono, int], ...] = ()

    @staticmethod
    def of(d: Mapping[Mono, int]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in d.items() if c)))

    @staticmethod
    def const(c: int) -> Poly:
        return Poly.of({(): c})

    @staticmethod
    def sym(s: str) -> Poly:
        return Poly.of({(s,): 1})

    def d(self) -> dict[Mono, int]:
        return dict(self.terms)

    def __add__(self, o: Poly) -> Poly:
        r = self.d()
        for m, c in o.terms:
            r[m] = r.get(m, 0) + c
        return Poly.of(r)

    def __neg__(self) -> Poly:
        return Poly.of({m: -c for m, c in self.terms})

    def __sub__(self, o: Poly) -> Poly:
        return self + (-o)

    def __mul__(self, o: Poly) -> Poly:
        r: dict[Mono, int] = {}
        for (ma, ca), (mb, cb) in itertools.product(self.terms, o.terms):
            m = tuple(sorted(ma + mb))
            r[m] = r.get(m, 0) + ca * cb
        return Poly.of(r)

    def symbols(self) -> set[str]:
        return {s for m, _ in self.terms for s in m}

    def constant(self) -> int | None:
        """The value when the polynomial has no symbol, else None."""
        if self.symbols():
            return None
        return self.d().get((), 0)

    def coefficient(self, s: str) -> Poly:
        """The part multiplying ``s`` (each term with ``s`` once, divided by it)."""
        r: dict[Mono, int] = {}
        for m, c in self.terms:
            if m.count(s) == 1:
                rest = list(m)
                rest.remove(s)
                r[tuple(rest)] = r.get(tuple(rest), 0) + c
        return Poly.of(r)

    def degree_in(self, syms: Iterable[str]) -> int:
        ss = set(syms)
        return max((sum(1 for s in m if s in ss) for m, _ in self.terms), default=0)

    def substitute(self, s: str, by: Poly) -> Poly:
        out = Poly()
        for m, c in self.terms:
            term = Poly.const(c)
            for v in m:
                term = term * (by if v == s else Poly.sym(v))
            out = out + term
        return out

    def value(self, env: Callable[[str], Any]) -> Any:
        total: Any = 0
        for m, c in self.terms:
            term: Any = c
            for s in m:
                term = term * env(s)
            total = total + term
        return total

    def text(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            names = [s.lstrip("$") for s in m]
            body = "*".join(names) if names else ""
            parts.append(body if c == 1 and body else f"{c}*{body}" if body else str(c))
        return " + ".join(parts).replace("+ -", "- ")


@dataclass(frozen=True)
class Lin:
    """An index value: a polynomial, the symbols it holds wrapped modulo a polynomial
    (``(x + 1) % n`` is ``x + 1`` with ``x`` wrapped modulo ``n``), and the symbols it holds
    chosen by a condition (``s, c, a, b``: ``c ? a : b`` where ``a`` is ``s`` plus a constant,
    as in ``r < rows - 1 ? r + 1 : r``; :mod:`.lift_regions` checks it clamps ``a`` to the
    grid)."""

    poly: Poly
    wraps: frozenset[tuple[str, Poly]] = frozenset()
    clamps: frozenset[tuple[str, Pred, Poly, Poly]] = frozenset()

    def __add__(self, o: Lin) -> Lin:
        return Lin(self.poly + o.poly, self.wraps | o.wraps, self.clamps | o.clamps)

    def __sub__(self, o: Lin) -> Lin:
        return Lin(self.poly - o.poly, self.wraps | o.wraps, self.clamps | o.clamps)

    def __mul__(self, o: Lin) -> Lin:
        return Lin(self.poly * o.poly, self.wraps | o.wraps, self.clamps | o.clamps)


@dataclass(frozen=True)
class Pred:
    """A guard: ``op`` one of < <= > >= == != (on ``a``, ``b``), and, or, not, true, false."""

    op: str
    a: Any = None
    b: Any = None

    def __and__(self, o: Pred) -> Pred:
        if self.op == "true" or o.op == "false":
            return o
        if o.op == "true" or self.op == "false":
            return self
        return Pred("and", self, o)

    def __or__(self, o: Pred) -> Pred:
        if self.op == "false" or o.op == "true":
            return o
        if o.op == "false" or self.op == "true":
            return self
        return Pred("or", self, o)

    def __invert__(self) -> Pred:
        if self.op in ("true", "false"):
            return FALSE if self.op == "true" else TRUE
        return Pred("not", self)

    def evaluate(self, env: Callable[[str], Any], shape: tuple[int, ...]) -> np.ndarray:
        if self.op in ("true", "false"):
            return np.full(shape, self.op == "true")
        if self.op in ("and", "or"):
            a, b = self.a.evaluate(env, shape), self.b.evaluate(env, shape)
            return a & b if self.op == "and" else a | b
        if self.op == "not":
            return ~self.a.evaluate(env, shape)
        a, b = self.a.value(env), self.b.value(env)
        ops = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
               "==": np.equal, "!=": np.not_equal}
        return np.broadcast_to(ops[self.op](a, b), shape)


TRUE, FALSE = Pred("true"), Pred("false")


@dataclass(frozen=True)
class Read(ex.Expr):
    """A load from pointer parameter ``param`` (named ``ptr``) at ``index``, zero where
    ``guard`` fails (a conditional read; TRUE: unconditional)."""

    ptr: str
    param: int
    index: Lin
    guard: Pred = TRUE


@dataclass
class Derived:
    """``base % mod`` and ``base / mod`` (together ``base = lo + mod * hi``)."""

    base: str
    mod: Poly
    lo: str
    hi: str


@dataclass
class Symbols:
    """The derived symbols of one kernel, and how to expand or evaluate through them."""

    pairs: dict[str, Derived] = field(default_factory=dict)  # base -> pair
    points: Poly = field(default_factory=Poly)  # the grid's point count, once known
    tables: dict[str, int] = field(default_factory=dict)  # buffers read at fixed elements

    def split(self, base: str, mod: Poly) -> Derived:
        d = self.pairs.get(base)
        if d is not None and d.mod != mod:
            raise Unliftable(f"{base} is divided by both {d.mod.text()} and {mod.text()}")
        if d is None:
            m = mod.text()
            d = self.pairs[base] = Derived(base, mod, f"({base})%{m}", f"({base})/{m}")
        return d

    def expand(self, p: Poly) -> Poly:
        """``p`` with every split symbol written as ``lo + mod*hi`` (recursively)."""
        for _ in range(8):
            hit = [s for s in p.symbols() if s in self.pairs]
            if not hit:
                return p
            for s in hit:
                d = self.pairs[s]
                p = p.substitute(s, Poly.sym(d.lo) + d.mod * Poly.sym(d.hi))
        return p

    def env(self, known: Mapping[str, Any]) -> Callable[[str], Any]:
        """Symbol values from those ``known`` (coordinates and parameters); Unliftable for a
        symbol that cannot be computed from them."""
        memo: dict[str, Any] = dict(known)
        active: set[str] = set()
        by_part = {}
        for d in self.pairs.values():
            by_part[d.lo], by_part[d.hi] = d, d

        def get(s: str) -> Any:
            if s in memo:
                return memo[s]
            if s in active:
                raise Unliftable(f"the index {s} does not follow from the written point")
            active.add(s)
            try:
                if s in self.pairs:
                    d = self.pairs[s]
                    v = get(d.lo) + d.mod.value(get) * get(d.hi)
                elif s in by_part:
                    d = by_part[s]
                    b, m = get(d.base), d.mod.value(get)
                    v = b % m if s == d.lo else b // m
                else:
                    raise Unliftable(f"the index {s} does not follow from the written point "
                                     "(an index from threadIdx alone, gridDim or a loop)")
            finally:
                active.discard(s)
            memo[s] = v
            return v

        return get


def normalize(p: Poly) -> Poly:
    """``blockIdx.a*blockDim.a + threadIdx.a`` (times anything) as the global index ``ga``."""
    for a in "xyz":
        bid, bdim, tid = f"bid.{a}", f"bdim.{a}", f"tid.{a}"
        d = p.d()
        for m, c in list(d.items()):
            if bid in m and bdim in m and m in d:
                rest = list(m)
                rest.remove(bid)
                rest.remove(bdim)
                partner = tuple(sorted([*rest, tid]))
                if d.get(partner) == c:
                    del d[m], d[partner]
                    g = tuple(sorted([*rest, f"g{a}"]))
                    d[g] = d.get(g, 0) + c
        p = Poly.of(d)
    return p


def samples(params: Mapping[str, tuple[int, str]]) -> list[dict[str, int]]:
    """Values of the integer parameters to evaluate guards at: two rising with the parameters'
    order, one falling (a guard that holds only while one size exceeds another)."""
    ints = [n for n, (_, k) in params.items() if k == "int"]
    return [{f"${n}": 9 + 2 * k for k, n in enumerate(ints)},
            {f"${n}": 12 + 3 * k for k, n in enumerate(ints)},
            {f"${n}": 12 + 3 * (len(ints) - 1 - k) for k, n in enumerate(ints)}]


class Grid:
    """One concrete grid: coordinate arrays, symbol values, extents (x first). ``shifts``:
    coordinates whose point is the coordinate plus a constant (``i = gy + 1``): at a point,
    the coordinate is the point's index minus it, and points no thread reaches (a coordinate
    below zero) store nothing."""

    def __init__(self, syms: Symbols, coords: list[str], strides: list[Poly], last: Any,
                 sample: dict[str, int], shifts: Mapping[str, int] | None = None) -> None:
        self.sample, self.coords = sample, coords
        sv = [int(s.value(sample.__getitem__)) for s in strides]
        ext = [sv[1] if len(sv) > 1 else 0, sv[2] // sv[1] if len(sv) > 2 else 0]
        self.ext = ext[:len(coords) - 1] + [last(sample)]  # x first
        self.strides = sv
        shape = tuple(reversed(self.ext))
        self.shape = shape
        grids = np.indices(shape)  # z, y, x order reversed
        known: dict[str, Any] = dict(sample)
        self.reached = np.ones(shape, dtype=bool)
        for a, c in enumerate(coords):
            known[c] = grids[len(coords) - 1 - a] - (shifts or {}).get(c, 0)
            if (shifts or {}).get(c):
                self.reached &= known[c] >= 0
        self.env: Callable[[str], Any] = syms.env(known)

    def mask(self, p: Pred) -> np.ndarray:
        return np.asarray(p.evaluate(self.env, self.shape), dtype=bool) & self.reached


def last_extent(syms: Symbols, coords: list[str], strides: list[Poly], guards: list[Pred],
                 wraps: set[tuple[str, Poly]], samples: list[dict[str, int]],
                 shifts: Mapping[str, int] | None = None
                 ) -> tuple[Callable[[dict[str, int]], int], Poly]:
    c = coords[-1]
    mods = {m for s, m in wraps if s == c}
    if len(mods) > 1:
        raise Unliftable(f"axis {c} wraps modulo {', '.join(m.text() for m in mods)}")
    if mods:
        m = mods.pop()
        return (lambda s: int(m.value(s.__getitem__))), m
    live = Pred("false")
    for guard in guards:
        live = live | guard
    tops = []
    for sample in samples:
        big = 2 * max(sample.values(), default=8) ** 2 + 16  # past a product of two sizes
        g = Grid(syms, coords, strides, lambda s, big=big: big, sample, shifts)
        mask = g.mask(live)
        hit = np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))
        if hit.size == 0:
            raise Unliftable("no thread stores anything (the guards exclude every point)")
        if hit[-1] >= big - 1:
            raise Unliftable(f"no guard bounds the grid's last axis ({c}): threads past it "
                             "would store")
        tops.append(int(hit[-1]))
    names = sorted(samples[0])
    cands = [(a,) for a in names] + list(itertools.combinations_with_replacement(names, 2))
    for cand in cands:
        ws = [int(np.prod([s[v] for v in cand])) - 1 - top for s, top in
              zip(samples, tops, strict=True)]
        if ws[0] == ws[1] and 0 <= ws[0] <= MAX_WIDTH:
            p = Poly.of({tuple(sorted(cand)): 1})
            return (lambda s, p=p: int(p.value(s.__getitem__))), p
    raise Unliftable(f"the extent of axis {c} follows from no integer parameter")


def quotient(a: Poly, b: Poly) -> str:
    if len(b.terms) == 1 and b.terms[0][1] == 1:
        m = list(b.terms[0][0])
        out: dict[tuple[str, ...], int] = {}
        for mono, c in a.terms:
            rest = list(mono)
            for s in m:
                if s not in rest:
                    return f"({a.text()})/({b.text()})"
                rest.remove(s)
            out[tuple(rest)] = c
        return Poly.of(out).text()
    return f"({a.text()})/({b.text()})"
