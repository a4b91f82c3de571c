"""Where a thread's point lies and which points a kernel computes (for :mod:`.lift_regions`
and :mod:`.lift_exprs`): a ``max``/``min`` of indices decided for every thread, a written index
offset by whole points along the axes, and the box of computed points with the layers it leaves
at each face."""

from __future__ import annotations

import numpy as np

from ..stencil.program import FACES
from .lift_symbolic import MAX_WIDTH, Poly, Pred, Unliftable, normalize


def point_shifts(offset: Poly, coords: list[str], strides: list[Poly], sample: dict[str, int]
                 ) -> dict[str, int]:
    """The written point's index minus ``x + SY*y + SZ*z`` as whole points along the axes
    (``i = gy + 1, j = gx + 1``: the thread's point is one up and one right of its indices):
    per coordinate the constant added to it."""
    if offset == Poly():
        return {}
    d = int(offset.value(sample.__getitem__))
    sv = [int(s.value(sample.__getitem__)) for s in strides]
    off = [0] * len(coords)
    for a in reversed(range(1, len(coords))):
        off[a] = round(d / sv[a])
        d -= off[a] * sv[a]
    off[0] = d
    want = sum((strides[a] * Poly.const(off[a]) for a in range(len(coords))), Poly())
    if want != offset or max(abs(v) for v in off) > MAX_WIDTH:
        raise Unliftable(f"the written point is offset by {offset.text()}, no fixed number of "
                         "points along the axes (a padded grid, or an origin given by "
                         "parameters)")
    low = [c for c, v in zip(coords, off, strict=True) if v < 0 and "@" not in c]
    if low:
        raise Unliftable(f"the written point is the thread's index minus a constant along "
                         f"{', '.join(low)}: threads would write before the grid")
    return {c: v for c, v in zip(coords, off, strict=True) if v}


def box_widths(computed: np.ndarray) -> dict[str, int]:
    """Per face the layers between it and the box of ``computed`` points (numpy axes z, y,
    x); Unliftable where the computed points are no box."""
    pts = np.argwhere(computed)  # (z, y, x) rows
    if pts.size == 0:
        raise Unliftable("no point is computed by every output")
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    box = np.zeros(computed.shape, dtype=bool)
    box[tuple(slice(int(a), int(b) + 1) for a, b in zip(lo, hi, strict=True))] = True
    if not np.array_equal(box, computed):
        raise Unliftable("the points the kernel computes are not a box within the grid")
    shape = computed.shape
    widths: dict[str, int] = {}
    for face in FACES:
        a = "xyz".index(face[0])
        ax = len(shape) - 1 - a  # its numpy axis
        widths[face] = 0 if a >= len(shape) else int(lo[ax]) if face[1] == "-" else \
            int(shape[ax] - 1 - hi[ax])
    return widths


_HARDWARE = ("tid.", "bid.", "bdim.", "gdim.")


def nonnegative(p: Poly) -> bool:
    """Whether ``p >= 0`` for every thread: non-negative coefficients over the hardware
    indices (threadIdx, blockIdx, blockDim, gridDim and the global indices) only."""
    return all(c >= 0 and all(s.startswith(_HARDWARE) or s in ("gx", "gy", "gz") for s in m)
               for m, c in p.terms)


def min_max(c: Pred, a: Poly, b: Poly) -> Poly | None:
    """``c ? a : b`` where ``c`` compares ``a`` with ``b`` (a ``max`` or ``min``) and one of
    them is at least the other for every thread (``max(blockIdx.x * blockDim.x, 0)``): the
    one chosen; else None."""
    a, b = normalize(a), normalize(b)
    if c.op not in ("<", "<=", ">", ">="):
        return None
    if (c.a, c.b) == (a, b):
        larger = c.op in (">", ">=")
    elif (c.a, c.b) == (b, a):
        larger = c.op in ("<", "<=")
    else:
        return None
    if nonnegative(a - b):
        return a if larger else b
    if nonnegative(b - a):
        return b if larger else a
    return None
