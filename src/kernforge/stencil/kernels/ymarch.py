"""The y-marching design for planar (2D) star and box stencils: the plane sweep's 2D analogue.

Each thread owns ``VX`` consecutive x points of a row segment and marches down a chunk of
``LY`` rows of its z-plane. The ``2R+1`` rows its outputs need live in a register queue (each
row as its ``VX`` lanes plus ``R`` values either side, ``VX + 2R`` in all), so every input
element is read once per thread column: one aligned vector load per row for the lanes (coalesced
along x across the warp) and ``2R`` scalar loads for the x halo (the neighbours' lanes: L1
hits). ``PF`` rows are loaded ahead of the row being computed (a prefetch ring in the queue),
so loads for later rows are in flight while a row is summed and stored. ``LY`` and ``PF`` are
compile-time constants and the row loop is unrolled: the queue's shifts are register renames.

A chunk always has ``LY`` rows: the last chunk of a column is shifted back to end at the last
interior row, so it recomputes (and rewrites with the same values) a few rows of its neighbour
instead of testing every row. Threads are laid out over absolute x, so the vector loads stay
aligned (``NX % VX == 0``); lanes outside the interior load but never store; the x halo is read
only where it lies in the row (the first and the last row of a plane have no row before or
after it).

Parameters: ``tx, ty`` (block: ``ty`` chunks stacked in y share the rows between them in L1),
``vx`` (lanes per thread), ``ly`` (rows per thread; 0 picks from the grid: the longest chunk that
still launches :data:`THREADS` threads), ``pf`` (rows in flight ahead, at most ``ly``), ``minb``
(``__launch_bounds__`` minimum blocks per SM), ``cw`` (fp64: weights in constant memory).
Builds planar stencils only (3D ones march along z: ``zmarch``, ``planesweep``), so no matrix
cell, and no pinned source, changes. Weights that are zero (a recognized kernel's stencil spec
has zeros where the kernel reads nothing) are left out of the sum.
"""

from __future__ import annotations

from typing import Any

from ..operator import Launch, Operator
from ..spec import Cell, Precision
from .common import (
    DoesNotFit,
    bounds,
    cdiv,
    check_minb,
    constant_weight_defs,
    extents,
    header,
    load,
    store,
    weight_defs,
    weight_names,
)
from .design import MINB, Design, Space, knobs

THREADS = 1 << 19  # about two waves of the H200 at full occupancy: ly=0's target
LY = (32, 16, 8, 4, 2, 1)  # the chunk lengths ly=0 chooses from, longest first
VX = {Precision.FP16: (8, 4, 2, 1), Precision.FP32: (4, 2, 1), Precision.FP64: (2, 1, 4)}


def auto_rows(cell: Cell, vx: int, target: int = THREADS) -> int:
    """The longest chunk of :data:`LY` (at most the interior rows) whose launch has ``target``
    threads; the shortest when none has."""
    (nz, ny_int, _), nx = cell.interior, cell.shape.nx
    fits = [ly for ly in LY if ly <= ny_int]
    for ly in fits:
        if cdiv(nx, vx) * cdiv(ny_int, ly) * nz >= target:
            return ly
    return fits[-1] if fits else 1


def _row(cell: Cell, vx: int, dst: str, row: str) -> list[str]:
    """Statements loading input row ``row`` (lanes and x halo) into ``dst[0 .. vx+2R)``."""
    p, r = cell.precision, cell.radius
    out = [f"{{ const Vec c = *reinterpret_cast<const Vec*>(s + ({row}) * NX);"]
    out += [f"  {dst}[{r + lane}] = {load(p, f'c.v[{lane}]')};" for lane in range(vx)]
    out.append("}")
    acc = p.acc_ctype
    for d in range(1, r + 1):
        out.append(f"{dst}[{r - d}] = hl ? {load(p, f's[({row}) * NX - {d}]')} : ({acc})0;")
        out.append(f"{dst}[{r + vx - 1 + d}] = hr ? {load(p, f's[({row}) * NX + {vx - 1 + d}]')}"
                   f" : ({acc})0;")
    return out


def _sums(cell: Cell, vx: int) -> list[str]:
    """``res[lane]``: the weighted sum over the queue's rows ``0 .. 2R`` (row ``R``: the
    centre), zero weights left out."""
    r = cell.radius
    acc = cell.precision.acc_ctype
    out = []
    for lane in range(vx):
        terms = [f"{w} * q[{r + dy}][{r + lane + dx}]"
                 for w, wv, (_, dy, dx) in zip(weight_names(cell), cell.stencil.weights,
                                               cell.stencil.offsets, strict=True) if wv != 0.0]
        out.append(f"res[{lane}] = {' + '.join(terms) or f'({acc})0'};")
    return out


def _kernel(cell: Cell, tx: int, ty: int, vx: int, ly: int, pf: int, lb: str) -> str:
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    r = cell.radius
    w, q = vx + 2 * r, 2 * r + pf  # values per row; rows in the queue (PF ahead)
    ind = "\n    "
    init = "\n".join(f"  {{{ind}" + ind.join(_row(cell, vx, f"q[{j}]", f"yb + {j - r}"))
                     + "\n  }" for j in range(q))
    nxt = ind.join(_row(cell, vx, "nx", f"yb + k + {r + pf}"))
    lanes = " ".join(f"if (x0 + {lane} >= R && x0 + {lane} < NX - R) d[{lane}] = "
                     f"{store(p, f'res[{lane}]')};" for lane in range(vx))
    whole = " ".join(f"o.v[{lane}] = {store(p, f'res[{lane}]')};" for lane in range(vx))
    return f"""
extern "C" __global__ void __launch_bounds__({lb})
ymarch(const {t}* __restrict__ src, {t}* __restrict__ dst) {{
  const long x0 = ((long)blockIdx.x * {tx} + threadIdx.x) * {vx};
  if (x0 + {vx} <= R || x0 >= NX - R) return;  // no interior lane
  long yb = R + ((long)blockIdx.y * {ty} + threadIdx.y) * {ly};
  if (yb >= NY - R) return;
  if (yb + {ly} > NY - R) yb = NY - R - {ly};  // the last chunk, shifted back: {ly} rows
  const long plane = (long)blockIdx.z * NY * NX;
  const {t}* __restrict__ s = src + plane + x0;
  const bool hl = x0 >= R, hr = x0 + {vx} + R <= NX;  // the x halo lies in the row
  const bool whole = x0 >= R && x0 + {vx} <= NX - R;  // every lane interior
  {acc} q[{q}][{w}];  // rows yb+k-R .. yb+k+R+{pf - 1}: lanes -R .. {vx - 1}+R
{init}
  #pragma unroll
  for (int k = 0; k < {ly}; ++k) {{
    {acc} nx[{w}];
    if (k + {pf} < {ly}) {{  // the row {pf} ahead of the queue's last
    {nxt}
    }}
    {acc} res[{vx}];
    {ind.join(_sums(cell, vx))}
    {t}* const d = dst + plane + (yb + k) * NX + x0;
    if (whole) {{
      Vec o; {whole}
      *reinterpret_cast<Vec*>(d) = o;
    }} else {{
      {lanes}
    }}
    #pragma unroll
    for (int j = 0; j < {q - 1}; ++j) {{
      #pragma unroll
      for (int l = 0; l < {w}; ++l) q[j][l] = q[j + 1][l];
    }}
    if (k + {pf} < {ly}) {{
      #pragma unroll
      for (int l = 0; l < {w}; ++l) q[{q - 1}][l] = nx[l];
    }}
  }}
}}
"""


def generate(cell: Cell, tx: int = 64, ty: int = 2, vx: int = 2, ly: int = 0, pf: int = 2,
             minb: int = 1, cw: int = 0) -> Operator:
    st = cell.stencil
    if st.dims != 2:
        raise DoesNotFit(f"ymarch builds planar stencils, not {st.name}",
                         hint="3D stencils march along z: zmarch, planesweep")
    if st.kind not in ("star", "box") or st.temporal:
        raise DoesNotFit(f"ymarch handles single-step star and box stencils, not {st.name}")
    if vx not in (1, 2, 4, 8) or cell.shape.nx % vx:
        raise DoesNotFit(f"vx={vx}: 1, 2, 4 or 8 dividing NX={cell.shape.nx} (aligned vector "
                         "loads)")
    nz, ny_int, nx_int = cell.interior
    if min(nz, ny_int, nx_int) < 1:
        raise DoesNotFit(f"{cell.id} has no interior")
    if nz > 65535:
        raise DoesNotFit(f"{nz} z-planes: at most 65535 (the grid's z)")
    if ly < 0 or pf < 1 or tx < 1 or ty < 1:
        raise DoesNotFit("ly >= 0 (0: from the grid), pf >= 1, tx and ty >= 1")
    if cw not in (0, 1) or (cw and cell.precision is not Precision.FP64):
        raise DoesNotFit("cw (weights in constant memory) is for fp64")
    check_minb(tx * ty, minb)
    ly = min(ly or auto_rows(cell, vx), ny_int)
    pf = min(pf, ly)  # no more rows ahead than the chunk has
    weights = constant_weight_defs(cell) if cw else weight_defs(cell)
    vec = f"struct __align__({cell.precision.itemsize * vx}) Vec {{ {cell.precision.ctype} " \
          f"v[{vx}]; }};\n"
    source = header(cell) + extents(cell) + weights + vec + \
        _kernel(cell, tx, ty, vx, ly, pf, bounds(tx * ty, minb))
    params: dict[str, Any] = {"tx": tx, "ty": ty, "vx": vx, "ly": ly, "pf": pf}
    params.update({k: v for k, v, first in (("minb", minb, 1), ("cw", cw, 0)) if v != first})
    grid = (cdiv(cell.shape.nx, tx * vx), cdiv(cdiv(ny_int, ly), ty), nz)
    return Operator(cell.id, "ymarch", params, source,
                    (Launch("ymarch", grid, (tx, ty, 1), ("in", "out")),))


def space(cell: Cell) -> Space:
    """Each parameter's values, the default first (``ly=0``: from the grid's shape)."""
    out: Space = {"vx": VX[cell.precision], "ly": (0, 4, 8, 16, 32), "pf": (2, 1, 4),
                  "tx": (64, 32, 128), "ty": (2, 1, 4), "minb": MINB}
    if cell.precision is Precision.FP64:
        out["cw"] = (0, 1)
    return out


def presets(cell: Cell) -> list[dict[str, Any]]:
    """Parameter sets to try where no search has run (operator matching), best guess first:
    16-byte lanes with the chunk from the grid (about two waves), the same with chunks twice
    as long (one wave: fewer halo rows re-read) and with more rows in flight, then one lane per
    thread (any row length; the fallback when the vectors do not divide the row)."""
    vec = VX[cell.precision][0]
    base = {"tx": 64, "ty": 2, "vx": vec, "ly": 0, "pf": 2}
    longer = min(2 * auto_rows(cell, vec), LY[0])
    return [base, {**base, "ly": longer}, {**base, "pf": 4},
            {**base, "vx": 1, "tx": 128, "ty": 1}]


KNOBS = knobs(
    "vx", "tx", "minb", "cw",
    ty="block height: chunks stacked in y, sharing the rows between them in L1",
    ly="y-chunk length: rows per thread (0: from the grid's shape)",
    pf="rows in flight: rows loaded ahead of the one summed (a prefetch ring in the queue)")

DESIGN = Design("ymarch", {"star": 0, "box": 0}, space, generate, KNOBS, planar=True,
                planar_only=True, presets=presets)
