"""z-marching with ``RY`` rows per thread (``ry``) and streaming stores (``sc``).

The plain :mod:`.zmarch` thread owns one row of ``VX`` points and loads both y neighbours of its
row every plane (mostly L1 hits, but each is an L1 request, and the block's edge rows are L2
requests). Here a thread owns ``RY`` consecutive rows of ``VX`` points, with ``RY`` register
queues along z: the y neighbours inside its rows come from its own queue's centre plane, so a
plane costs ``2R`` row loads per ``RY`` output rows instead of ``2R`` per row, and the block
covers ``TY * RY`` rows for the same ``2R`` halo rows (fewer L2 requests per output).

``sc=1`` writes the output with ``st.global.cs`` (``__stcs``: evict-first streaming stores), so
output lines do not displace the input planes the neighbouring blocks still read from L2.

Threads start at the first interior row; the last block of rows, where the interior's row count
is not a multiple of ``RY``, is shifted down to end at the last interior row (overlapping its
neighbour, which stores the same values), so every load stays inside the array and every row
offset is a constant.
"""

from __future__ import annotations

from ..spec import Cell
from .common import GLOBAL_VEC, XYZ, TileIndex, lane_stores, load, store
from .zmarch_staged import lane_sums

_STORE_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short"}


def _sums(cell: Cell, vx: int, ry: int) -> list[str]:
    """``res[i][l]`` for row ``i`` and lane ``l`` (:func:`.zmarch_staged.lane_sums` per row)."""
    p = cell.precision
    return [s for i in range(ry)
            for s in lane_sums(cell, vx, lambda v: load(p, v), f"cf{i}", row=i, ry=ry)]


def store_whole(cell: Cell, vx: int, sc: int, at: str = "at") -> str:
    """Store ``Vec o`` at ``dst + at``: one vector store, or ``__stcs`` of 16-byte (or smaller)
    pieces when ``sc``."""
    if not sc:
        return f"*reinterpret_cast<Vec*>(dst + {at}) = o;"
    nbytes = cell.precision.itemsize * vx
    piece = min(16, nbytes)
    ty = _STORE_TYPES[piece]
    return " ".join(
        f"__stcs(reinterpret_cast<{ty}*>(dst + {at}) + {k}, "
        f"reinterpret_cast<const {ty}*>(&o)[{k}]);" for k in range(nbytes // piece))


def kernel(cell: Cell, tx: int, ty: int, vx: int, lz: int, ry: int, sc: int, lb: str,
           pre_kernel: str = "", ld: str = GLOBAL_VEC, bi: TileIndex = XYZ) -> str:
    """Rows per thread (``ry``) and streaming stores (``sc``); ``pre_kernel``, ``ld``: the
    global ``Vec`` loads' helper and opening (:func:`.common.vec_loads`)."""
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    r = cell.radius
    qn = 2 * r + 1
    varcoeff = cell.stencil.kind == "varcoeff"
    coef = f"const {t}* __restrict__ coef, " if varcoeff else ""

    def row(k: int) -> str:  # row y0 + k of a plane's column at ``at``: a constant offset
        return f"({k}L) * NX"

    def fill(slot: str, src_name: str, i: int) -> str:
        return " ".join(f"q[{slot}][{i}][{lane}] = {load(p, f'{src_name}.v[{lane}]')};"
                        for lane in range(vx))

    def vec(array: str, at: str) -> str:
        return f"{ld}{array} + {at})"

    warm = "\n".join(f"    {{ const Vec c = {vec('src', f'(zb - R + j) * NY * NX + col + {row(i)}')};"
                     f" {fill('j', 'c', i)} }}" for i in range(ry))
    first = "\n".join(f"  Vec n{i} = {vec('src', f'(zb + R) * NY * NX + col + {row(i)}')};"
                      for i in range(ry))
    take = "\n".join(f"    {fill(str(qn - 1), f'n{i}', i)}" for i in range(ry))
    ahead = " ".join(f"n{i} = {vec('src', f'(z + 1 + R) * NY * NX + col + {row(i)}')};"
                     for i in range(ry))
    halo = []
    for d in range(1, r + 1):
        halo.append(f"const Vec ym{d} = {vec('src', f'base + {row(-d)}')};")
        halo.append(f"const Vec yp{d} = {vec('src', f'base + {row(ry - 1 + d)}')};")
    for i in range(ry):
        for d in range(1, r + 1):
            halo.append(f"const {acc} xl{d}_{i} = {load(p, f'src[base + {row(i)} - {d}]')};")
            halo.append(f"const {acc} xr{d}_{i} = "
                        f"{load(p, f'src[base + {row(i)} + {vx - 1 + d}]')};")
        if varcoeff:
            halo.append(f"const Vec cf{i} = {vec('coef', f'base + {row(i)}')};")
    stores = []
    for i in range(ry):
        def value(k: int, i: int = i) -> str:
            return store(p, f"res[{i}][{k}]")

        whole, lanes = lane_stores(vx, value, at="at")
        stores.append(
            f"      {{ const long at = base + {row(i)};\n"
            f"        if (x0 >= R && x0 + {vx} <= NX - R) {{ Vec o; {whole} "
            f"{store_whole(cell, vx, sc)} }}\n"
            f"        else {{ {lanes} }} }}")
    shift = (f"    #pragma unroll\n    for (int j = 0; j < {qn - 1}; ++j)\n"
             f"      #pragma unroll\n      for (int i = 0; i < {ry}; ++i)\n"
             f"        #pragma unroll\n        for (int l = 0; l < {vx}; ++l) "
             f"q[j][i][l] = q[j + 1][i][l];")
    body = "\n      ".join(halo + _sums(cell, vx, ry))
    return f"""
{pre_kernel}extern "C" __global__ void __launch_bounds__({lb})
zmarch(const {t}* __restrict__ src, {coef}{t}* __restrict__ dst) {{
  const long x0 = ((long){bi.x} * {tx} + threadIdx.x) * {vx};
  long y0 = R + ((long){bi.y} * {ty} + threadIdx.y) * {ry};
  if (y0 >= NY - R || x0 >= NX - R || x0 + {vx} <= R) return;
  // the last rows: a block of {ry} rows shifted down to end at the last interior row (it
  // overlaps its neighbour's, which stores the same values), so every load is inside
  if (y0 > NY - R - {ry}) y0 = NY - R - {ry};
  const long col = y0 * NX + x0;
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
  {acc} q[{qn}][{ry}][{vx}];
  #pragma unroll
  for (int j = 0; j < {qn - 1}; ++j) {{
{warm}
  }}
{first}
  for (long z = zb; z < ze; ++z) {{
{take}
    if (z + 1 < ze) {{ {ahead} }}
    const long base = z * NY * NX + col;
    {{
      {acc} res[{ry}][{vx}];
      {body}
{chr(10).join(stores)}
    }}
{shift}
  }}
}}
"""
