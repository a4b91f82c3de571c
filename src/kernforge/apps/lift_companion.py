"""Lifting a time loop's per-step boundary kernels ("companions") to face rules, by probing.

A step of a real time loop is often the stencil (apps/probe.py recognizes it) followed by a few
launches that overwrite faces of the stencil's output OUT: a Dirichlet face held at a value, a
zero-flux face copying its inner neighbour (examples/heat3d_cupy.py's ``apply_boundary``). To
fold them into a fused operator (apps/fused.py), each companion is run as a black box (a
:class:`~.probe.Target`: on the GPU a replay of its recorded launch, in the tests a numpy
function or the host emulator) on OUT filled with random values, several times, and what it
left is explained as :class:`~kernforge.stencil.faces.Face` rules:

- the points it writes are whole faces of the grid (the outermost layer normal to an axis),
  the same points whatever the values;
- each written point holds, bit for bit, a constant or the value ``d`` points inward along its
  face's axis (no arithmetic), one rule per face, the later rule winning where faces share an
  edge (an order of the faces that explains every edge point is found, or the kernel refused);
- no rule reads a point the launch writes (that would race between threads);
- nothing else changes: no other point of OUT, no other buffer, IN included; what it leaves does
  not depend on IN.

Anything else is refused with the reason (:class:`Refused`). A companion with a pointer to
any other buffer is no boundary kernel: apps/elide_companion.py decides whether a fused kernel
may elide it (a per-step diagnostic the held step re-runs).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..stencil import faces as fc
from .adapter import Slot
from .probe import Target

TRIALS = ((1.0, 2.0), (-2.0, -1.0), (-1e-3, 1e-3))  # OUT's random values per trial
# then trials whose points off the faces hold zeros, values near the type's largest, NaN (the
# faces random): a rule that tests the value it copies (a clamp, a NaN or zero replaced) shows
INTERIORS = ("zeros", "huge", "nan")


@dataclass(frozen=True)
class Written:
    """Bytes an elided companion writes: through parameter ``param``, bytes ``[start, end)`` of
    recorded region ``region`` (offsets in the region), elements of ``dtype`` (None: unknown)."""

    param: int
    region: int
    start: int
    end: int
    dtype: str | None = None

    def describe(self) -> str:
        return (f"region {self.region} bytes [{self.start}, {self.end})"
                f"{' of ' + self.dtype if self.dtype else ''}")


@dataclass(frozen=True)
class Companion:
    """A companion launch as the interposer matches it: the kernel's mangled ``entry``, its
    recorded parameter bytes, the byte offsets of its pointer words equal to the step's IN and
    OUT pointers; ``others``: the offsets of its pointer words to any other buffer (matched as
    recorded); ``image``: the interposer's id of the module image it was recorded from
    (deploy/native.py ``image_id``; None: not known, a kernel of its name from any image);
    ``geometry``: the (grid, block, dynamic shared memory) it was recorded with (None: any);
    ``attrs``: the launch attributes it was recorded with (72 bytes each). FOLDED: ``faces``, what it does to OUT (lifted), applied in order. ELIDED
    (``elided`` is not None): it writes only other buffers (``elided``), every written byte a
    function of the step's state, read by no later step (apps/elide_companion.py)."""

    entry: str
    params: bytes
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    faces: tuple[fc.Face, ...] = ()
    others: tuple[int, ...] = ()
    elided: tuple[Written, ...] | None = None
    image: str | None = None
    geometry: tuple[tuple[int, int, int], tuple[int, int, int], int] | None = None
    attrs: tuple[bytes, ...] = ()

    @property
    def role(self) -> str:
        return "folded" if self.elided is None else "elided"

    def spec(self) -> dict[str, object]:
        """The companion as a fused spec entry lists it (JSON: ``name``, ``params`` in hex,
        ``in_slots``, ``out_slots``, and for an elided one ``same_slots``: its pointers to the
        other buffers, matched as in the first held step, not as recorded, so that the program
        may put them elsewhere in another run; ``image`` when known)."""
        d: dict[str, object] = {"name": self.entry, "params": self.params.hex(),
                                "in_slots": list(self.in_slots),
                                "out_slots": list(self.out_slots)}
        if self.elided is not None and self.others:
            d["same_slots"] = list(self.others)
        if self.image is not None:
            d["image"] = self.image
        if self.geometry is not None:  # launched with another, it is not this companion
            g, b, m = self.geometry
            d.update(grid=list(g), block=list(b), shared_mem=m)
        if self.attrs:  # launched with other attributes, it is not this companion
            d["launch_attrs"] = [a.hex() for a in self.attrs]
        return d

    def evidence(self) -> dict[str, object]:
        """:meth:`spec` with what it is: ``role`` and ``does`` (its face rules, or the bytes
        it writes, left to the held step that re-runs it)."""
        does = fc.describe((self.faces,)) if self.elided is None else \
            "writes " + (", ".join(w.describe() for w in self.elided) or "nothing")
        return {**self.spec(), "role": self.role, "does": does}


@dataclass(frozen=True)
class Refused:
    reason: str


def companion(entry: str, params: bytes, slots: Sequence[Slot], in_ptr: int, out_ptr: int
              ) -> Companion | Refused:
    """The companion launch of ``entry`` with recorded ``params`` (laid out as ``slots``): its
    pointer words equal to IN and OUT, and those to other buffers. With no other buffer it is
    a boundary kernel to fold, refused unless it takes OUT once; with others, a candidate to
    elide (apps/elide_companion.py decides)."""
    ins: list[int] = []
    outs: list[int] = []
    others: list[int] = []
    for s in slots:
        if not s.pointer:
            continue
        v = int.from_bytes(params[s.offset:s.offset + 8], "little")
        (outs if v == out_ptr else ins if v == in_ptr else others).append(s.offset)
    if not others and len(outs) != 1:
        return Refused(f"{entry}: {len(outs)} parameters point to OUT; a companion that "
                       "rewrites faces of OUT takes it once")
    return Companion(entry, bytes(params), tuple(ins), tuple(outs), others=tuple(others))


def _faces(shape: tuple[int, int, int]) -> list[fc.Face]:
    """Every face of a (nz, ny, nx) grid, along the axes longer than 2 points (a face rule is
    written with source 0: a placeholder)."""
    return [fc.Face(a, side, 0) for a in range(3) if shape[a] > 2 for side in (0, 1)]


def _plane(f: fc.Face, shape: tuple[int, int, int], d: int = 0) -> tuple[Any, ...]:
    at: list[Any] = [slice(None)] * 3
    at[f.axis] = fc.index(f, shape[f.axis]) + f.inward * d
    return tuple(at)


def _rule(f: fc.Face, xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], own: np.ndarray,
          shape: tuple[int, int, int]) -> fc.Face | str:
    """The rule of face ``f`` from its points in ``own`` (on no other written face): one
    constant, or one inward distance, for all of them in every trial."""
    vals = [y[_plane(f, shape)][own] for y in ys]
    if all(_same(vals[0], v) for v in vals[1:]):
        c = np.unique(vals[0])
        if c.size == 1:
            return fc.Face(f.axis, f.side, 0, float(c[0]))
        return f"face {f.where} holds {c.size} different constants"
    for d in range(1, (shape[f.axis] + 1) // 2):
        if all(_same(v, x[_plane(f, shape, d)][own]) for v, x in zip(vals, xs)):
            return fc.Face(f.axis, f.side, d)
    return (f"face {f.where} is neither a constant nor a copy of the value some "
            "points inward (computed, or data-dependent)")


def _value_at(f: fc.Face, x: np.ndarray, at: np.ndarray, shape: tuple[int, int, int]
              ) -> np.ndarray:
    """What rule ``f`` writes at the flat indices ``at`` (on its face), from the values ``x``
    before the launch."""
    if f.source == 0:
        return np.full(at.size, x.dtype.type(f.value))
    stride = (shape[1] * shape[2], shape[2], 1)[f.axis]
    return x.reshape(-1)[at + f.inward * f.source * stride]


def _order(rules: list[fc.Face], shape: tuple[int, int, int], xs: Sequence[np.ndarray],
           ys: Sequence[np.ndarray]) -> tuple[fc.Face, ...] | None:
    """An order of ``rules`` whose sequential application reproduces every trial: on each
    edge two faces share (corners left out), the face whose value stays comes later; the
    order found (z, y, x faces first where nothing says otherwise) is then checked."""
    masks = [_mask(f, shape) for f in rules]
    after: dict[int, set[int]] = {i: set() for i in range(len(rules))}  # i after these
    for i, j in itertools.combinations(range(len(rules)), 2):
        if rules[i].axis == rules[j].axis:
            continue
        edge = masks[i] & masks[j]
        for k, m in enumerate(masks):
            if k not in (i, j):
                edge &= ~m
        at = np.flatnonzero(edge)
        wins_i = all(_same(y.reshape(-1)[at], _value_at(rules[i], x, at, shape))
                     for x, y in zip(xs, ys))
        wins_j = all(_same(y.reshape(-1)[at], _value_at(rules[j], x, at, shape))
                     for x, y in zip(xs, ys))
        if wins_i != wins_j:
            after[i if wins_i else j].add(j if wins_i else i)
    order: list[int] = []
    while len(order) < len(rules):
        ready = [i for i in range(len(rules)) if i not in order and after[i] <= set(order)]
        if not ready:
            return None  # a cycle: no order explains the edges
        order.append(ready[0])
    got = tuple(rules[i] for i in order)
    ok = all(_same(fc.apply(x, (got,)), y) for x, y in zip(xs, ys))
    return got if ok else None


def _mask(f: fc.Face, shape: tuple[int, int, int]) -> np.ndarray:
    m = np.zeros(shape, dtype=bool)
    m[_plane(f, shape)] = True
    return m


def _races(order: tuple[fc.Face, ...], written: np.ndarray, shape: tuple[int, int, int]
           ) -> str | None:
    """Why a rule reads a point the same launch writes (where it is the last writer)."""
    owner = np.full(shape, -1)
    for i, f in enumerate(order):
        owner[_plane(f, shape)] = i
    for i, f in enumerate(order):
        if f.source and np.any(written[_plane(f, shape, f.source)][owner[_plane(f, shape)] == i]):
            return (f"rule {f.describe()} reads points the same launch writes (an order "
                    "between its threads that the fused kernel cannot reproduce)")
    return None


def lift(t: Target, out_param: int, in_params: Sequence[int], shape: tuple[int, int, int],
         dtype: str, seed: int = 4242) -> tuple[fc.Face, ...] | Refused:
    """The face rules companion ``t`` applies to OUT (parameter ``out_param``) of a grid of
    ``shape`` (nx, ny, nz) in ``dtype``; ``in_params``: its parameters pointing to IN."""
    nx, ny, nz = shape
    grid = (nz, ny, nx)
    n, dt = nx * ny * nz, np.dtype(dtype)
    bufs = {b.param: b for b in t.buffers}
    if out_param not in bufs or bufs[out_param].nbytes < n * dt.itemsize:
        return Refused(f"OUT (parameter {out_param}) holds fewer than the grid's {n} points")
    rng = np.random.default_rng(seed)

    def raw(p: int, a: np.ndarray) -> np.ndarray:
        b = rng.integers(0, 256, bufs[p].nbytes, dtype=np.uint8)  # past the grid: noise
        b[:a.nbytes] = a.view(np.uint8)
        return b

    xs, ys = [], []
    ins = {p: raw(p, rng.uniform(-1, 1, bufs[p].nbytes // dt.itemsize).astype(dt))
           for p in in_params}
    trials: list[tuple[float, float] | str] = [*TRIALS, *INTERIORS]
    for k, trial in enumerate(trials):
        x = _trial(trial, grid, dt, rng)
        given = {out_param: raw(out_param, x), **ins}
        if k == 1:  # another IN: what the companion leaves must not depend on it
            given.update({p: raw(p, rng.uniform(-1, 1, bufs[p].nbytes // dt.itemsize)
                                 .astype(dt)) for p in in_params})
        got = t.run(given)
        for p, b in got.items():
            if p != out_param and not np.array_equal(b, given.get(p, b)):
                return Refused(f"it writes parameter {p}'s buffer, not only OUT")
        if not np.array_equal(got[out_param][n * dt.itemsize:],
                              given[out_param][n * dt.itemsize:]):
            return Refused(f"it writes OUT beyond the grid's {n} points")
        xs.append(x.reshape(grid))
        ys.append(got[out_param][:n * dt.itemsize].view(dt).reshape(grid).copy())
        if k == 1 and in_params:
            again = t.run({**given, **ins})
            if not np.array_equal(again[out_param], got[out_param]):
                return Refused("what it leaves in OUT depends on IN (it reads the step's "
                               "input buffer)")
    return explain(xs, ys, grid)


def _trial(trial: tuple[float, float] | str, grid: tuple[int, int, int], dt: np.dtype,
           rng: np.random.Generator) -> np.ndarray:
    """OUT's values (flat) in a trial: random in a range, or random on the faces and one kind
    of value (:data:`INTERIORS`) off them."""
    n = grid[0] * grid[1] * grid[2]
    if not isinstance(trial, str):
        return rng.uniform(trial[0], trial[1], n).astype(dt)
    x = rng.uniform(1.0, 2.0, grid).astype(dt)
    off = np.ones(grid, dtype=bool)
    for f in _faces(grid):
        off[_plane(f, grid)] = False
    big = float(np.finfo(dt).max) if dt.kind == "f" else 0.0
    x[off] = rng.uniform(0.25, 0.5, int(off.sum())) * big if trial == "huge" else \
        {"zeros": 0.0, "nan": float("nan")}[trial]
    return x.reshape(-1)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


def explain(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], grid: tuple[int, int, int]
            ) -> tuple[fc.Face, ...] | Refused:
    """Face rules that turn every ``xs[k]`` into ``ys[k]`` (grids of shape ``grid``, (nz, ny,
    nx)), or why there are none; the trials after the :data:`TRIALS` (:data:`INTERIORS`) may
    leave a written point as it was (a value written onto itself), never change another."""
    changed = [(x != y) & ~(np.isnan(x) & np.isnan(y)) for x, y in zip(xs, ys)]
    random = min(len(TRIALS), len(changed))  # the others may write a point its own value
    if any(not np.array_equal(changed[0], c) for c in changed[1:random]) or \
            any((c & ~changed[0]).any() for c in changed[random:]):
        return Refused("the points it writes depend on the values (data-dependent)")
    written = changed[0]
    if not written.any():
        return ()
    faces = _faces(grid)
    on_face = np.zeros(grid, dtype=bool)
    for f in faces:
        on_face[_plane(f, grid)] = True
    inside = written & ~on_face
    if inside.any():
        z, y, x = (int(v[0]) for v in np.nonzero(inside))
        return Refused(f"it writes inside the grid (at z={z}, y={y}, x={x}): only face "
                       "rules are folded")
    whole = [f for f in faces if written[_plane(f, grid)].all()]
    cover = np.zeros(grid, dtype=bool)
    for f in whole:
        cover[_plane(f, grid)] = True
    if (written & ~cover).any():
        return Refused("it writes part of a face (face rules cover whole faces)")
    rules = []
    for f in whole:
        others = np.zeros(grid, dtype=bool)
        for g in whole:
            if g != f:
                others[_plane(g, grid)] = True
        own = ~others[_plane(f, grid)]
        if not own.any():
            return Refused(f"face {f.where} lies wholly on other faces it writes")
        rule = _rule(f, xs, ys, own, grid)
        if isinstance(rule, str):
            return Refused(rule)
        rules.append(rule)
    order = _order(rules, grid, xs, ys)
    if order is None:
        return Refused("no order of its face rules explains the edges it writes")
    race = _races(order, written, grid)
    return Refused(race) if race else order


def lift_all(targets: Sequence[tuple[Companion, Target, int, Sequence[int]]],
             shape: tuple[int, int, int], dtype: str) -> tuple[Companion, ...] | Refused:
    """Each companion (with its probe target, its OUT parameter and IN parameters) lifted, in
    launch order; the first refusal, naming the kernel."""
    out = []
    for c, t, out_param, in_params in targets:
        got = lift(t, out_param, in_params, shape, dtype)
        if isinstance(got, Refused):
            return Refused(f"{c.entry}: {got.reason}")
        out.append(replace(c, faces=got))
    return tuple(out)


def groups(companions: Sequence[Companion]) -> fc.Groups:
    """The face-rule groups of ``companions`` (one per launch; a launch that writes nothing,
    or an elided one, adds none)."""
    return tuple(c.faces for c in companions if c.faces)
