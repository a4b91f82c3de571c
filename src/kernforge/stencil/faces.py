"""Face rules: what a time loop's per-step boundary kernels do to the grid after the stencil.

A real time loop often launches, after each stencil sweep, small kernels that overwrite faces
of the new level: a Dirichlet face held at a value, a zero-flux face copying its inner
neighbour. Such a kernel is described as a group of :class:`Face` rules (one group per launch,
the groups in launch order). Within a group every rule reads points the group does not write
(apps/lift_companion.py refuses anything else), so applying its rules one after another equals
the launch; where two faces of a group share an edge point, the later rule's value stays.

A face is the outermost layer of the grid normal to one axis: index 0 (``lo``) or ``n - 1``
(``hi``) along it. Its rule sets every point of the face to a constant (``source`` 0) or to the
value ``source`` points inward along the same axis (an exact copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

AXES = "zyx"  # axis 0 is z (slowest), 2 is x (contiguous)
Groups = tuple[tuple["Face", ...], ...]


@dataclass(frozen=True)
class Face:
    """One face rule: axis (0 z, 1 y, 2 x), side (0: index 0, 1: index n - 1), source (0: the
    constant ``value``; d >= 1: the value d points inward along ``axis``)."""

    axis: int
    side: int
    source: int
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.axis not in (0, 1, 2) or self.side not in (0, 1) or self.source < 0:
            raise ValueError(f"not a face rule: {self!r}")

    @property
    def inward(self) -> int:
        """+1 on a lo face, -1 on a hi face: the direction of the grid's inside."""
        return 1 - 2 * self.side

    @property
    def where(self) -> str:
        return f"{AXES[self.axis]}={'0' if self.side == 0 else 'n-1'}"

    def describe(self) -> str:
        where = self.where
        if self.source == 0:
            return f"{where} := {self.value!r}"
        sign = "+" if self.side == 0 else "-"
        return f"{where} := {AXES[self.axis]}{sign}{self.source}"


def describe(groups: Groups) -> str:
    return "; ".join("[" + ", ".join(f.describe() for f in g) + "]" for g in groups)


def index(face: Face, n: int) -> int:
    """The face's index along its axis on a grid of ``n`` points."""
    return 0 if face.side == 0 else n - 1


def apply(grid: np.ndarray, groups: Groups) -> np.ndarray:
    """``grid`` (shape (nz, ny, nx)) after the groups' rules, in their order (a new array of
    the same dtype: copies are exact, constants are stored in that dtype)."""
    g = grid.copy()
    for group in groups:
        for f in group:
            n = g.shape[f.axis]
            at: list[Any] = [slice(None)] * 3
            at[f.axis] = index(f, n)
            if f.source == 0:
                g[tuple(at)] = g.dtype.type(f.value)
            else:
                src = list(at)
                src[f.axis] = index(f, n) + f.inward * f.source
                g[tuple(at)] = g[tuple(src)]
    return g


def mask(shape: tuple[int, int, int], groups: Groups) -> np.ndarray:
    """The points any rule of ``groups`` writes, on a (nz, ny, nx) grid."""
    m = np.zeros(shape, dtype=bool)
    for group in groups:
        for f in group:
            at: list[Any] = [slice(None)] * 3
            at[f.axis] = index(f, shape[f.axis])
            m[tuple(at)] = True
    return m


def check(groups: Groups, shape: tuple[int, int, int], radii: Sequence[int]) -> str | None:
    """Why ``groups`` cannot be folded into a stencil of ``radii`` (z, y, x) on ``shape``
    (nz, ny, nx), or None: a rule along an axis the stencil does not reach (each plane is
    its own grid there), or one that copies from past the grid's middle."""
    for group in groups:
        for f in group:
            if radii[f.axis] == 0:
                return (f"a face rule along {AXES[f.axis]}, an axis the stencil does not reach "
                        "(its planes are separate grids)")
            if f.source == 0 and not np.isfinite(f.value):
                return f"rule {f.describe()}: a constant that is not finite"
            if 2 * f.source >= shape[f.axis]:
                return (f"rule {f.describe()} copies from {f.source} points inward on a grid "
                        f"of {shape[f.axis]} points along {AXES[f.axis]}")
    return None
