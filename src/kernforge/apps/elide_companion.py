"""Companions of a time loop's step that a fused operator ELIDES: per-step diagnostics.

A step may launch, besides the stencil and its boundary kernels (folded as face rules,
apps/lift_companion.py), kernels that only look at the step's grids and write elsewhere:
examples/heat3d_cupy.py's ``sq_diff_partial`` (reads IN and OUT, writes ``partial``) and
``sum_partials`` (reads ``partial``, writes ``out``). The interposer runs T held steps as one
fused launch and keeps the last whole step held; that step, and anything flushed, always runs as
the original launches (record/native/kf_defer.c). So a companion whose effect is DEAD in every
step but the last needs no code in the fused kernel: the held step re-runs it on the right
state. A companion is elided when, probed as a black box on the sequence's placement:

- it writes neither IN nor OUT (it may read them);
- every byte it writes is a function of the step's state alone: launched twice from the same
  state with complementary garbage in the buffers it writes, it leaves the same bytes (no
  accumulation across steps, no byte kept from before), and writes the same bytes from every
  state tried: random ones, and those where a test of the values goes the other way (OUT
  equal to IN, as in a converged step; zeros; NaN; values near the type's largest), so that a
  convergence flag set only while the step changes something, or a blow-up check, is refused;
- nothing the step reads later is what it writes: not a buffer of the stencil's launch, not one
  of a folded companion, not one an elided companion earlier in the step (or itself, through
  another parameter) reads. One later in the step may read it (``sum_partials`` reads
  ``partial``): its value then is this step's.

Anything else is refused with the reason (:class:`~.lift_companion.Refused`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from . import lift_companion as lc
from .probe import Target

STATES = 3  # random states of the step each candidate is probed from (and the STILL ones)
STILL = {"zeros": 0.0, "nan": float("nan")}  # grids of one value: a write set decided by values
Span = tuple[int, int, int]  # region, first byte, end byte (offsets in the region)


@dataclass(frozen=True)
class Launch:
    """A companion to classify: the launch (:class:`~.lift_companion.Companion`, from
    :func:`~.lift_companion.companion`), its probe target, its parameters pointing to IN and
    OUT (indices), and where each pointer parameter points: (region, byte offset in it)."""

    companion: lc.Companion
    target: Target
    in_params: tuple[int, ...]
    out_params: tuple[int, ...]
    places: Mapping[int, tuple[int, int]]
    dtypes: Mapping[int, str] = field(default_factory=dict)  # pointer parameter -> element

    def spans(self, params: Sequence[int] | None = None) -> list[tuple[int, Span]]:
        """(parameter, what it can reach: from the pointer to its allocation's end)."""
        sizes = {b.param: b.nbytes for b in self.target.buffers}
        return [(p, (ri, off, off + sizes[p])) for p, (ri, off) in self.places.items()
                if p in sizes and (params is None or p in params)]


def overlap(a: Span, b: Span) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def probe(t: Target, in_params: Sequence[int], out_params: Sequence[int], dtype: str,
          seed: int = 5151) -> dict[int, np.ndarray] | lc.Refused:
    """Per parameter it writes, the mask of the bytes it writes (each a function of the state),
    or why it is not elided; ``dtype``: the grids' element type (their random values)."""
    bufs = {b.param: b for b in t.buffers}
    io = [p for p in bufs if p in in_params or p in out_params]
    others = [p for p in bufs if p not in io]
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)

    def noise(p: int) -> np.ndarray:
        return rng.integers(0, 256, bufs[p].nbytes, dtype=np.uint8)

    def grid(p: int, kind: str = "random") -> np.ndarray:
        b = noise(p)
        k = bufs[p].nbytes // dt.itemsize
        v = rng.uniform(-1, 1, k) if kind == "random" else \
            rng.uniform(0.25, 0.5, k) * float(np.finfo(dt).max) if kind == "huge" else \
            np.full(k, STILL[kind])
        b[:k * dt.itemsize] = v.astype(dt).view(np.uint8)
        return b

    def states() -> list[dict[int, np.ndarray]]:
        """Random states, then those where a write that tests the values goes the other way:
        a converged step (every grid holding the same values), zeros, NaN, values near the
        type's largest."""
        got = [{p: grid(p) for p in io} for _ in range(STATES)]
        if io:
            same = grid(io[0])
            got.append({p: np.resize(same, bufs[p].nbytes) for p in io})
        kinds = (*STILL, "huge") if dt.kind == "f" else ("zeros",)
        return got + [{p: grid(p, kind) for p in io} for kind in kinds]

    def twice(state: dict[int, np.ndarray], junk: dict[int, np.ndarray]
              ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]] | lc.Refused:
        got = [t.run({**state, **junk}), t.run({**state, **{p: ~g for p, g in junk.items()}})]
        for p in io:
            if any(not np.array_equal(g[p], state[p]) for g in got):
                return lc.Refused(f"it writes parameter {p}, the step's "
                                  f"{'OUT' if p in out_params else 'IN'} (only face rules "
                                  "folded into the fused kernel may change the grids)")
        return got[0], got[1]

    state = {p: grid(p) for p in io}
    junk = {p: noise(p) for p in others}
    got = twice(state, junk)
    if isinstance(got, lc.Refused):
        return got
    writes = [p for p in others if not np.array_equal(got[0][p], junk[p])
              or not np.array_equal(got[1][p], ~junk[p])]
    masks: dict[int, np.ndarray] = {}
    for grids in states():
        state = grids | {p: noise(p) for p in others if p not in writes}
        junk = {p: noise(p) for p in writes}
        got = twice(state, junk)
        if isinstance(got, lc.Refused):
            return got
        a, b = got
        for p in others:
            if p not in writes:
                if not np.array_equal(a[p], state[p]) or not np.array_equal(b[p], state[p]):
                    return lc.Refused(f"whether it writes parameter {p} depends on the values")
                continue
            m = (a[p] != junk[p]) | (b[p] != ~junk[p])
            if not np.array_equal(a[p][m], b[p][m]):
                return lc.Refused(f"what it leaves in parameter {p} depends on what the buffer "
                                  "held before (it accumulates across steps, or keeps "
                                  "something from an earlier step)")
            if p in masks and not np.array_equal(masks[p], m):
                return lc.Refused(f"the bytes it writes through parameter {p} depend on the "
                                  "values")
            masks[p] = m
    return {p: m for p, m in masks.items() if m.any()}


def written(c: Launch, masks: Mapping[int, np.ndarray]) -> tuple[lc.Written, ...]:
    out = []
    for p, m in sorted(masks.items()):
        at = np.flatnonzero(m)
        ri, off = c.places[p]
        out.append(lc.Written(p, ri, off + int(at[0]), off + int(at[-1]) + 1, c.dtypes.get(p)))
    return tuple(out)


def classify(launches: Sequence[Launch], stencil: Sequence[Span],
             shape: tuple[int, int, int], dtype: str) -> tuple[lc.Companion, ...] | lc.Refused:
    """Each companion of a step, in launch order, folded (its face rules lifted) or elided (the
    bytes it writes), or the first refusal naming the kernel. ``stencil``: what the stencil's
    launch can reach through each of its pointer parameters (IN, OUT and any other)."""
    out: list[lc.Companion] = []
    for c in launches:
        k = c.companion
        if not k.others:
            got = lc.lift(c.target, c.out_params[0], c.in_params, shape, dtype)
            if isinstance(got, lc.Refused):
                return lc.Refused(f"{k.entry}: {got.reason}")
            out.append(replace(k, faces=got, elided=None))
            continue
        masks = probe(c.target, c.in_params, c.out_params, dtype)
        if isinstance(masks, lc.Refused):
            return lc.Refused(f"{k.entry}: {masks.reason}")
        out.append(replace(k, faces=(), elided=written(c, masks)))
    why = readers(launches, out, stencil)
    return lc.Refused(why) if why else tuple(out)


def readers(launches: Sequence[Launch], comps: Sequence[lc.Companion],
            stencil: Sequence[Span]) -> str | None:
    """Why something the step reads later (the stencil, a folded companion, an elided one at or
    before the writer) may read what an elided companion writes, or None."""
    for i, (c, k) in enumerate(zip(launches, comps, strict=True)):
        for w in k.elided or ():
            span = (w.region, w.start, w.end)
            if any(overlap(span, s) for s in stencil):
                return (f"{k.entry}: the stencil's launch reaches what it writes "
                        f"({w.describe()}): the fused kernel would read it")
            for j, (d, m) in enumerate(zip(launches, comps, strict=True)):
                if m.elided is not None and j > i:
                    continue  # read later in the step: this step's value
                mine = {x.param for x in m.elided or ()} if j == i else set()
                if any(overlap(span, s) for p, s in d.spans() if p not in mine):
                    who = "a folded boundary kernel" if m.elided is None else \
                        "itself, through another parameter," if j == i else \
                        "an elided kernel earlier in the step"
                    return (f"{k.entry}: {who} ({m.entry}) reaches what it writes "
                            f"({w.describe()}) and would read a value of the step before")
    return None
