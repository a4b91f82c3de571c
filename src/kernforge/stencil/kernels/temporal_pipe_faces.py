"""A time loop's face rules in the pipelined temporal kernel (:mod:`.temporal_pipe`, ``pipe=1``).

The rule model is stencil/faces.py's and the fold is :mod:`.temporal_faces`'s (the first
kernel's): the value a point ends a step with is a gather, found by walking the rules backwards
from the point: each rule that writes it sets a constant or moves the point ``d`` inward, and
where no earlier rule writes the point any more the value is the stencil's (or the kept one) at
that point. The walk along y and x depends only on the point's column, so each thread walks
once per point before the z-march and keeps a tile index into the staged plane (``gi``), or a
constant (``g..._c``, ``g..._v``), or nothing (``gs``: the point is its own source).

In the pipelined kernel every stage computes its plane's raw values into temporaries (phase 1,
after the iteration's barrier, stages last to first as before). Then, in a block whose tile
holds a face that an in-plane rule writes (``faced``, the same in the whole block), a barrier
(every stage has read the staged planes of this iteration's parity), each stage publishes its
raw values into that parity's buffer of the step it read (stage ``s`` into step ``s - 1``'s),
a barrier, and each point takes its gathered value: two barriers more per iteration, no
shared memory more. With ``gb=1`` the stages publish into a buffer of their own (``T`` planes
more) and the first of the two barriers goes. Other blocks skip this (no barrier more than the
kernel without rules). Then each stage applies the z rules, which need no other
thread: a z face set to a constant takes it (``zv``, after the in-plane rules that follow its
last z rule); the top face copied from ``d`` planes in takes the stage's queue register that
holds plane ``n - 1 - d`` (``d`` up to 3); the bottom face copied from ``d`` planes in is
patched in the queue when plane ``d`` is done (``d`` up to 2). The stage then pushes the value
into its queue, or, the last stage, stores it. A copied z face's plane is stored when the plane
it copies is (the two end every step alike). Copies move values only: a copied point equals its
source bit for bit.

Tiles cover the whole grid, faces included; the last tile along each axis (and the last chunk
along z) is moved back to end at the grid's far face, so a face's source lies in the tile's
owned points, which must number more than the rule's ``d`` (as in :mod:`.temporal_faces`).
The tile's first column stays aligned to ``cx``.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import faces as fc
from ..spec import Cell, Precision
from .common import DoesNotFit
from .temporal_faces import HI_Z_COPY, LO_Z_COPY, _const, _flat, _last_z, walk


def check(cell: Cell, faces: fc.Groups, bw: int, bh: int, lz: int, h2: int) -> None:
    """:class:`DoesNotFit` where the rules cannot fold into this tiling (``bw`` x ``bh``
    owned points, ``lz`` planes a chunk)."""
    if cell.precision is Precision.FP16 or h2:
        raise DoesNotFit("face rules fold into fp32 and fp64 grids")
    s = cell.shape
    why = fc.check(faces, (s.nz, s.ny, s.nx), cell.stencil.radii)
    if why:
        raise DoesNotFit(why)
    own = {0: lz, 1: bh, 2: bw}
    for f in _flat(faces):
        if f.source >= own[f.axis]:
            raise DoesNotFit(f"rule {f.describe()}: a tile must own more than {f.source} "
                             f"points along {fc.AXES[f.axis]} (it owns {own[f.axis]})")
        far = LO_Z_COPY if f.side == 0 else HI_Z_COPY
        if f.axis == 0 and f.source > far:
            raise DoesNotFit(f"rule {f.describe()}: the z-march holds the {far} planes "
                             "inward of that face, not more")


def setup(cell: Cell, faces: fc.Groups, pts: list[tuple[int, int]], cy: int, w: int, h: int
          ) -> str:
    """Per point (row ``i``, lane ``l``) before the march: ``gs{i}{l}`` (its own value),
    else ``g{i}{l}_c`` (the constant ``g{i}{l}_v``) or ``gi{i}{l}`` (the staged plane's index of
    the point whose value it takes); each z face's constant ``zv0``/``zv1`` where its last z
    rule sets one; ``faced``: the tile holds a face an in-plane rule writes."""
    flat = _flat(faces)
    plane = [f for f in flat if f.axis]
    lines = []
    for i, lane in pts:
        q, px, py = f"g{i}{lane}_", f"gx0 + {lane}", f"gy{i}"
        lines += walk(cell, plane, q, px, py, "int")
        col = f"c0 + {lane} + ({q}x - ({px}))"
        row = f"ty * {cy} + {i} + ({q}y - {py})"
        lines.append(f"  const int gi{i}{lane} = ({row} < 0 ? 0 : {row} > {h - 1} ? {h - 1} : "
                     f"{row}) * {w} + ({col} < 0 ? 0 : {col} > {w - 1} ? {w - 1} : {col});"
                     "  // clamped: such a source serves no valid point")
        lines.append(f"  const bool gs{i}{lane} = !{q}c && {q}x == {px} && {q}y == {py};")
        for side in (0, 1):
            j = _last_z(flat, side)
            if j is None or flat[j].source:
                continue
            z = f"z{side}{i}{lane}_"
            lines += walk(cell, [f for f in flat[j + 1:] if f.axis], z, px, py, "int")
            lines.append(f"  const ACC zv{side}_{i}{lane} = {z}c ? {z}v : "
                         f"{_const(cell, flat[j].value)};")
    conds = []
    for axis, a, n in ((2, "x", w), (1, "y", h)):
        if any(f.axis == axis for f in plane):
            lo = "tile_x0" if a == "x" else "oy"
            hi, big = f"{lo} + {n - 1}", f"N{a.upper()}"
            conds.append(f"({lo} <= 0 && {hi} >= 0) || ({lo} <= {big} - 1 && {hi} >= {big} - 1)")
    faced = " || ".join(f"({c})" for c in conds) or "false"
    lines.append(f"  const bool faced = {faced};  // the same in the whole block")
    return "\n".join(lines) + "\n"


def _z(faces: fc.Groups) -> tuple[int | None, int, int | None, int]:
    """(position of the last bottom z rule, its copy distance, the same for the top)."""
    flat = _flat(faces)
    lo, hi = _last_z(flat, 0), _last_z(flat, 1)
    return (lo, flat[lo].source if lo is not None else 0,
            hi, flat[hi].source if hi is not None else 0)


def stores(faces: fc.Groups, store_at: Callable[[str], list[str]]) -> list[str]:
    """The last stage's stores of plane ``p`` (``store_at(plane)``: the store lines): a
    copied z face's plane is stored with the plane it copies, not on its own."""
    _, dlo, _, dhi = _z(faces)
    keep = ["(unsigned)(p - z0) < (unsigned)(z1 - z0)"]
    keep += ["p != 0"] if dlo else []
    keep += ["p != NZ - 1"] if dhi else []
    lines = [f"        if ({' && '.join(keep)}) {{", *store_at("p"), "        }"]
    if dlo:
        lines += [f"        if (p == {dlo} && z0 == 0) {{", *store_at("0"), "        }"]
    if dhi:
        lines += [f"        if (p == NZ - 1 - {dhi} && z1 == NZ) {{", *store_at("(NZ - 1)"),
                  "        }"]
    return lines


def finish(faces: fc.Groups, j: int, steps: int, pts: list[tuple[int, int]], buf: int,
           units: int, cy: int, fast: bool, store_at: Callable[[str], list[str]]
           ) -> list[str]:
    """Phase 2 of iteration ``k + j``: the gathers (faced blocks; not in the ``fast`` body,
    whose tile holds no face) through staged buffer ``buf`` (2: the gathers' own, published
    without waiting for the stages' reads), the z rules, the pushes and the last stage's
    stores."""
    lo, dlo, hi, dhi = _z(faces)
    lines = []
    if not fast:
        lines.append("      if (faced) {  // in-plane rules: gather from the published values")
        if buf < 2:  # buffer 2: the gathers' own (gb=1)
            lines.append("        __syncthreads();  // every stage has read this parity's planes")
        for s in range(1, steps + 1):
            for i in range(cy):
                vals = ", ".join(f"r{s}_{i}{lane}" for lane in range(units))
                lines.append(f"        *reinterpret_cast<SV*>(sm + {buf * steps + s - 1} * PL"
                             f" + orow{i}) = SV{{{{{vals}}}}};")
        lines.append("        __syncthreads();")
        for s in range(1, steps + 1):
            for i, lane in pts:
                lines.append(f"        if (!gs{i}{lane}) r{s}_{i}{lane} = g{i}{lane}_c ? "
                             f"g{i}{lane}_v : (sm + {buf * steps + s - 1} * PL)[gi{i}{lane}];")
        lines.append("      }")
    for s in range(steps, 0, -1):
        lines.append(f"      {{  // stage {s}, ruled: plane kk - {2 * s}")
        lines.append(f"        const int p = kk - {2 * s};")
        for i, lane in pts:
            r = f"r{s}_{i}{lane}"
            if not fast:
                if lo is not None and not dlo:
                    lines.append(f"        if (p == 0) {r} = zv0_{i}{lane};")
                if hi is not None and not dhi:
                    lines.append(f"        if (p == NZ - 1) {r} = zv1_{i}{lane};")
                elif hi is not None and s < steps:
                    lines.append(f"        if (p == NZ - 1) {r} = q{s}_{(j - dhi) % 3}_{i}{lane};")
            if s < steps:
                lines.append(f"        q{s}_{j % 3}_{i}{lane} = {r};")
                if dlo:  # plane 0 ends as plane dlo does: patch its queue register
                    lines.append(f"        if (p == {dlo}) q{s}_{(j - dlo) % 3}_{i}{lane} = {r};")
        if s == steps:
            lines += stores(faces, store_at)
        lines.append("      }")
    return lines
