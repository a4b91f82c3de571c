"""Overlapped tiling: ``steps`` sweeps of a stencil in one launch, for any radius, 2D or 3D.

A block owns an output tile of ``ox x oy`` points (``x oz`` for a 3D stencil; a planar one
takes one z-plane per block) and loads it with a ``steps * r`` halo on every side the stencil
reaches into shared memory (two buffers of the extended tile, in the storage type, so every
step rounds as a one-step kernel's store does). Step ``s`` computes level ``s`` from level
``s - 1`` over the extended tile shrunk by ``s * r``; after the last step the owned tile is
exactly valid and is written. Neighbouring blocks recompute the halo they share: the price of
reading the grid once and writing it once for all steps.

Unlike the matrix's designs, which keep the boundary ring of ``out`` as the caller preset it,
this one takes the boundary rule of a kernel it stands in for (apps/probe.py), as a time loop
of that kernel would see it, with ``in`` and ``out`` swapped after every step:

- ``copy``: the ring at every level is ``in``'s (written to ``out`` at the end);
- ``zero``: the ring is 0 from level 1 on;
- ``keep``: the kernel never writes the ring, so level ``s`` reads the ring of the buffer step
  ``s`` reads: ``in``'s at even levels, ``out``'s at odd ones (read from global memory);
  ``out``'s ring is not written;
- ``zeropad``: every grid point is computed, points outside the grid read as 0;
- ``periodic``: every grid point is computed, the halo wraps around the grid.

``faces`` (stencil/faces.py) folds a time loop's per-step boundary kernels in (with ``keep``,
``copy`` or ``zero``): after each level's stencil, the groups' face rules overwrite the level's
face points in the tile, one rule at a time, in order. A copied face point reads the same
level ``d`` points inward, which the tile holds whenever the block owns at least ``d + 1``
points along that axis beyond the face: the last block along an axis is therefore moved back
to end at the grid's far edge (it recomputes and rewrites, with the same bits, points the
block before it owns), so no wider halo is needed. Copies are plain loads and stores.

``in`` is only read. The knobs are declared here and nowhere else (:data:`KNOBS`).
"""

from __future__ import annotations

from typing import Any

from .. import faces as fc
from ..operator import Launch, Operator
from ..spec import Cell, Precision
from .common import DoesNotFit, cdiv, header, literal
from .design import Space, knobs

RULES = ("keep", "copy", "zero", "zeropad", "periodic")
FACE_BASES = ("keep", "copy", "zero")  # the rules face rules fold into
MAX_SHARED = 48 * 1024  # static shared memory: more needs a function attribute
MAX_STEPS = 63

KNOBS = knobs(
    steps="fused steps: sweeps per launch (more reuse of each loaded tile, a wider halo "
          "recomputed by every block)",
    ox="output tile width (x points a block writes)",
    oy="output tile height (y points a block writes)",
    oz="output tile depth (z planes a block writes; 3D stencils)",
    block="thread block shape: the threads that sweep the extended tile at every step")


def space(cell: Cell) -> Space:
    """Each knob's values, the default first."""
    if cell.stencil.dims == 3:
        return {"steps": (3, 5, 7), "ox": (32, 64, 16), "oy": (8, 4, 16), "oz": (4, 8, 2),
                "block": ((32, 4, 2), (32, 8, 1), (64, 4, 1))}
    return {"steps": (3, 5, 7, 9, 11), "ox": (64, 32, 128), "oy": (32, 16, 64), "oz": (1,),
            "block": ((32, 8, 1), (64, 4, 1), (32, 16, 1), (128, 2, 1))}


def presets(cell: Cell, steps: int) -> list[dict[str, Any]]:
    """Tiles to try for ``steps`` where no search has run, best guess first: extended tiles of
    whole warps in x first (128 or 64 wide: every step's rows fill their lanes), then fixed
    output tiles, smaller ones last (they fit the shared memory of wider halos and fp64). Some
    may not fit a cell (:func:`generate` says so)."""
    _, ry, rx = cell.stencil.radii
    hx, hy = 2 * steps * rx, 2 * steps * ry
    tiles: list[dict[str, Any]]
    if cell.stencil.dims == 3:
        tiles = [{"ox": 32, "oy": 8, "oz": 4, "block": (32, 4, 2)},
                 {"ox": 32, "oy": 4, "oz": 4, "block": (32, 4, 1)},
                 {"ox": 16, "oy": 4, "oz": 4, "block": (16, 4, 2)}]
    else:
        tiles = [{"ox": 128 - hx, "oy": 32 - hy, "oz": 1, "block": (32, 8, 1)},
                 {"ox": 64 - hx, "oy": 32 - hy, "oz": 1, "block": (32, 8, 1)},
                 {"ox": 64, "oy": 32, "oz": 1, "block": (32, 8, 1)},
                 {"ox": 128, "oy": 16, "oz": 1, "block": (128, 2, 1)},
                 {"ox": 64, "oy": 16, "oz": 1, "block": (64, 4, 1)},
                 {"ox": 32, "oy": 16, "oz": 1, "block": (32, 8, 1)}]
    return [t for t in tiles if int(t["ox"]) >= 8 and int(t["oy"]) >= 4]


def extended(cell: Cell, steps: int, ox: int, oy: int, oz: int) -> tuple[int, int, int]:
    """The extended tile (ex, ey, ez): the output tile and ``steps * r`` halo on each side."""
    rz, ry, rx = cell.stencil.radii
    return (ox + 2 * steps * rx, oy + 2 * steps * ry, oz + 2 * steps * rz)


def shared_bytes(cell: Cell, steps: int, ox: int, oy: int, oz: int) -> int:
    ex, ey, ez = extended(cell, steps, ox, oy, oz)
    return 2 * ex * ey * ez * cell.precision.itemsize


def _check(cell: Cell, boundary: str, steps: int, ox: int, oy: int, oz: int,
           block: tuple[int, int, int], faces: fc.Groups = ()) -> None:
    if faces:
        if boundary not in FACE_BASES:
            raise DoesNotFit(f"face rules fold into boundary rules {', '.join(FACE_BASES)}, "
                             f"not {boundary!r}")
        s = cell.shape
        why = fc.check(faces, (s.nz, s.ny, s.nx), cell.stencil.radii)
        if why:
            raise DoesNotFit(why)
        tile = (oz, oy, ox)
        for f in (f for g in faces for f in g):
            if f.source >= tile[f.axis]:
                raise DoesNotFit(f"rule {f.describe()}: the output tile must hold more than "
                                 f"{f.source} points along {fc.AXES[f.axis]}")
    if cell.precision is Precision.FP16:
        raise DoesNotFit("overlapped tiling builds fp32 and fp64 grids")
    if cell.stencil.kind not in ("star", "box"):
        raise DoesNotFit(f"overlapped tiling builds star and box stencils, not {cell.stencil.kind}")
    if boundary not in RULES:
        raise DoesNotFit(f"boundary rule {boundary!r}: one of {', '.join(RULES)}")
    if not 1 <= steps <= MAX_STEPS:
        raise DoesNotFit(f"steps={steps}: 1 to {MAX_STEPS}")
    if min(ox, oy, oz) < 1 or (cell.stencil.dims == 2 and oz != 1):
        raise DoesNotFit(f"tile {ox}x{oy}x{oz}: positive, one plane deep for a planar stencil")
    if len(block) != 3 or min(block) < 1 or block[0] * block[1] * block[2] > 1024:
        raise DoesNotFit(f"block {block}: 1 to 1024 threads")
    if shared_bytes(cell, steps, ox, oy, oz) > MAX_SHARED:
        raise DoesNotFit(f"a {ox}x{oy}x{oz} tile with a {steps}-step halo needs "
                         f"{shared_bytes(cell, steps, ox, oy, oz)} bytes of shared memory, "
                         f"more than {MAX_SHARED}")


def _predicates(cell: Cell, boundary: str) -> tuple[str, str]:
    """C expressions over (gx, gy, gz): ``grid`` (the point is on the grid) and ``computed``
    (the stencil computes it at every step)."""
    (rz, ry, rx), s = cell.stencil.radii, cell.shape
    grid = "(gx >= 0 && gx < NX && gy >= 0 && gy < NY && gz >= 0 && gz < NZ)"
    if boundary == "periodic":
        return "true", "true"
    if boundary == "zeropad":
        return grid, grid
    conds = [f"g{a} >= {r} && g{a} < {n - r}" for a, r, n in
             (("x", rx, s.nx), ("y", ry, s.ny), ("z", rz, s.nz)) if r]
    return grid, "(" + " && ".join(conds) + ")"


def _inner_block(cell: Cell, boundary: str) -> str:
    """A C condition on the block's origin (x0, y0, z0): every point of its extended tile is
    computed (no boundary rule, no point off the grid), so the steps need no predicate."""
    if boundary == "periodic":
        return "true"
    (rz, ry, rx), s = cell.stencil.radii, cell.shape
    e = ("EX", "EY", "EZ")
    conds = []
    for (a, r, n), ext in zip((("x", rx, s.nx), ("y", ry, s.ny), ("z", rz, s.nz)), e,
                              strict=True):
        if r:
            lo = 0 if boundary == "zeropad" else r
            conds.append(f"{a}0 >= {lo} && {a}0 + {ext} <= {n - lo}")
    return "(" + " && ".join(conds) + ")"


def _loops(rz: int, ry: int, rx: int, block: tuple[int, int, int], body: str) -> str:
    """The extended tile shrunk by ``s * r``, swept by the block's threads, ``body`` at each
    point (lx, ly, lz; l its index)."""
    bx, by, bz = block
    return f"""    for (int lz = s * {rz} + tz; lz < EZ - s * {rz}; lz += {bz})
      for (int ly = s * {ry} + ty; ly < EY - s * {ry}; ly += {by})
        for (int lx = s * {rx} + tx; lx < EX - s * {rx}; lx += {bx}) {{
          const int l = (lz * EY + ly) * EX + lx;
          {body}
        }}
"""


_AXIS = (("z", "EZ", "NZ"), ("y", "EY", "NY"), ("x", "EX", "NX"))  # faces' axes 0, 1, 2


def _face_code(cell: Cell, faces: fc.Groups, threads: int) -> str:
    """After level ``s``'s stencil (in ``nxt``): each face rule over the face points of the
    level's region, one rule after another (a barrier after each)."""
    radii, t = cell.stencil.radii, cell.precision.ctype
    out = []
    for group in faces:
        for f in group:
            a, ext, n = _AXIS[f.axis]
            (p, pe, _), (q, qe, _) = (_AXIS[i] for i in (2, 1, 0) if i != f.axis)
            rp, rq = (radii["zyx".index(v)] for v in (p, q))
            at = "0" if f.side == 0 else f"{n} - 1"
            stride = {"x": "1", "y": "EX", "z": "EX * EY"}[a]
            value = (f"nxt[l + ({f.inward * f.source}) * {stride}]" if f.source
                     else f"({t})({float(f.value).hex()})")
            ra = radii[f.axis]
            out.append(f"""    {{  // face {f.describe()}
      const int la = {at} - {a}0;
      if (la >= s * {ra} && la < {ext} - s * {ra}) {{
        const int np = {pe} - 2 * s * {rp}, nq = {qe} - 2 * s * {rq};
        for (int k = tid; k < np * nq; k += {threads}) {{
          const int l{p} = s * {rp} + k % np, l{q} = s * {rq} + k / np, l{a} = la;
          const int l = (lz * EY + ly) * EX + lx;
          nxt[l] = {value};
        }}
      }}
      __syncthreads();
    }}
""")
    return "    if (!inner) {  // the step's boundary kernels, in launch order\n" + \
        "".join(out) + "    }\n"


def _on_face(faces: fc.Groups) -> str:
    """A C condition on (gx, gy, gz): a face rule writes the point."""
    conds = dict.fromkeys(f"g{_AXIS[f.axis][0]} == {'0' if f.side == 0 else _AXIS[f.axis][2] + ' - 1'}"
                          for g in faces for f in g)
    return "(" + " || ".join(conds) + ")"


def _source(cell: Cell, boundary: str, steps: int, ox: int, oy: int, oz: int,
            block: tuple[int, int, int], faces: fc.Groups = ()) -> str:
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    (rz, ry, rx), s = cell.stencil.radii, cell.shape
    ex, ey, ez = extended(cell, steps, ox, oy, oz)
    bx, by, bz = block
    threads = bx * by * bz
    terms = [(w, o) for w, o in zip(cell.stencil.weights, cell.stencil.offsets, strict=True)
             if w != 0.0]
    weights = "".join(f"constexpr {acc} KW{k} = {literal(w, p)};\n"
                      for k, (w, _) in enumerate(terms))
    total = " + ".join(f"KW{k} * ({acc})cur[l + ({(dz * ey + dy) * ex + dx})]"
                       for k, (_, (dz, dy, dx)) in enumerate(terms)) or f"({acc})0"
    on_grid, computed = _predicates(cell, boundary)
    at = "((long)gz * NY + gy) * NX + gx"
    if boundary == "periodic":
        fetch = ("const int wx = ((gx % NX) + NX) % NX, wy = ((gy % NY) + NY) % NY, "
                 "wz = ((gz % NZ) + NZ) % NZ;\n    v = in[((long)wz * NY + wy) * NX + wx];")
    else:
        fetch = f"if ({on_grid}) v = in[{at}];"
    ring = {"copy": "cur[l]", "zero": f"({t})0", "zeropad": f"({t})0", "periodic": f"({t})0",
            "keep": f"({on_grid} ? ((s & 1) ? out[{at}] : in[{at}]) : ({t})0)"}[boundary]
    real = "(gx < NX && gy < NY && gz < NZ)"  # an owned point past the grid's far edge
    write = f"{real} && {computed}" if boundary == "keep" else real
    if faces and boundary == "keep":
        write = f"{real} && ({computed} || {_on_face(faces)})"
    moved = {f.axis for g in faces for f in g if f.source}  # axes whose last block moves back
    origin = []
    for i, (a, o, r, n) in enumerate((("x", ox, rx, s.nx), ("y", oy, ry, s.ny),
                                      ("z", oz, rz, s.nz))):
        b = f"(int)blockIdx.{a} * {o}"
        if 2 - i in moved and n >= o:
            b = f"min({b}, {n - o})"
        origin.append(f"  const int {a}0 = {b} - {steps * r};\n")
    fast = _loops(rz, ry, rx, block, f"nxt[l] = ({t})({total});")
    if boundary == "periodic":
        steps_body = fast
    else:
        slow = _loops(rz, ry, rx, block, "const int gx = x0 + lx, gy = y0 + ly, gz = z0 + lz;\n"
                      f"          nxt[l] = {computed} ? ({t})({total}) : {ring};")
        steps_body = f"    if (inner) {{\n{fast}    }} else {{\n{slow}    }}\n"
    return f"""{header(cell)}// overlapped tiling: {steps} steps in one launch, boundary rule {boundary}
constexpr int NX = {s.nx}, NY = {s.ny}, NZ = {s.nz};
constexpr int EX = {ex}, EY = {ey}, EZ = {ez}, T = {steps};
{weights}extern "C" __global__ void __launch_bounds__({threads})
fused(const {t}* __restrict__ in, {t}* __restrict__ out) {{
  __shared__ {t} kf_tile[2][EZ * EY * EX];
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int tid = tx + {bx} * (ty + {by} * tz);
{"".join(origin)}  const bool inner = {_inner_block(cell, boundary)};  // no rule anywhere in the tile
  (void)inner;
  for (int k = tid; k < EZ * EY * EX; k += {threads}) {{  // level 0: in, with its halo
    const int gx = x0 + k % EX, gy = y0 + k / EX % EY, gz = z0 + k / (EX * EY);
    {t} v = ({t})0;
    {fetch}
    kf_tile[0][k] = v;
  }}
  __syncthreads();
  for (int s = 1; s <= T; ++s) {{  // level s over the tile shrunk by s * r
    const {t}* const cur = kf_tile[(s - 1) & 1];
    {t}* const nxt = kf_tile[s & 1];
{steps_body}    __syncthreads();
{_face_code(cell, faces, threads) if faces else ""}  }}
  const {t}* const fin = kf_tile[T & 1];
  for (int lz = {steps * rz} + tz; lz < {steps * rz + oz}; lz += {bz})
    for (int ly = {steps * ry} + ty; ly < {steps * ry + oy}; ly += {by})
      for (int lx = {steps * rx} + tx; lx < {steps * rx + ox}; lx += {bx}) {{
        const int gx = x0 + lx, gy = y0 + ly, gz = z0 + lz;
        if ({write}) out[{at}] = fin[(lz * EY + ly) * EX + lx];
      }}
}}
"""


def generate(cell: Cell, boundary: str, steps: int = 3, ox: int = 64, oy: int = 32,
             oz: int = 1, block: tuple[int, int, int] = (32, 8, 1), faces: fc.Groups = ()
             ) -> Operator:
    """One launch ``fused(in, out)`` applying ``steps`` sweeps of ``cell``'s stencil under
    ``boundary``, each followed by the ``faces`` groups' rules (module docstring);
    :class:`DoesNotFit` where the knobs do not fit."""
    block = tuple(block)  # type: ignore[assignment]
    faces = tuple(tuple(g) for g in faces if g)
    _check(cell, boundary, steps, ox, oy, oz, block, faces)
    s = cell.shape
    grid = (cdiv(s.nx, ox), cdiv(s.ny, oy), cdiv(s.nz, oz))
    if grid[1] > 65535 or grid[2] > 65535:
        raise DoesNotFit(f"{grid[1]} x {grid[2]} tiles in y and z: at most 65535 each")
    params = {"steps": steps, "ox": ox, "oy": oy, "oz": oz, "block": block,
              "boundary": boundary}
    if faces:
        params["faces"] = fc.describe(faces)
    source = _source(cell, boundary, steps, ox, oy, oz, block, faces)
    return Operator(cell.id, "overlap", params, source,
                    (Launch("fused", grid, block, ("in", "out")),))
