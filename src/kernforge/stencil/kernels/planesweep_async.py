"""The plane sweep with its planes staged by asynchronous copies (``st >= 1``, ``ca``).

Same thread layout, register-blocked accumulators and stores as :mod:`.planesweep`, but the
input planes reach the block through a ring of ``st + 2`` shared-memory stages filled by
``cp.async`` 16-byte copies (the copy helpers of :mod:`.ztile`): while plane ``k`` is summed,
planes up to ``k + st`` are already requested, and the copies hold no registers in flight (the
synchronous sweep keeps one plane in registers, ``PER`` values per thread). ``ca=1`` issues the
copies as ``cp.async.ca`` (cached in L1 as well), which made ztile's star operators 13-17%
faster on the H200; the box cells whose incumbents are plane sweeps (box_1 fp64)
had no staged-copy design.

Each stage holds the block's tile (``tx*vx`` x ``ty*ry`` points) with an ``R``-row y halo and a
16-byte x halo on each side (so every copy is aligned), in the storage type: fp32 and fp64, or
fp16 with ``h2=1`` (its sums read ``__half`` values; the fp32-accumulating fp16 sweep converts
on staging, which copies cannot). Chunks outside the array are not copied; the stale values
there feed only outputs that are not stored (every stored output reads inside the array).

Stage reuse: iteration ``k`` requests plane ``k + st`` into the stage that held plane
``k + st - (st + 2) = k - 2``; every thread passed iteration ``k - 1``'s barrier, so every read
of plane ``k - 2`` is done. ``cp.async.wait_group st`` leaves only the ``st`` newest planes in
flight, so plane ``k`` has landed; the barrier makes the other threads' copies visible.
"""

from __future__ import annotations

from ..spec import Cell, Precision
from . import planesweep
from .common import XYZ, DoesNotFit, TileIndex, bounds, extents, header
from .ztile import CHUNKS, MAX_SHARED, copies, stage


def shared_bytes(cell: Cell, tx: int, ty: int, vx: int, ry: int, st: int) -> int:
    item = cell.precision.itemsize
    pad = 16 // item
    return (st + 2) * (ty * ry + 2 * cell.radius) * (tx * vx + 2 * pad) * item


def check(cell: Cell, tx: int, ty: int, vx: int, ry: int, h2: int, st: int, ca: int) -> None:
    """:class:`.common.DoesNotFit` unless the asynchronous sweep can build this layout."""
    ch = 16 // cell.precision.itemsize
    if st not in (1, 2, 3) or ca not in (0, 1):
        raise DoesNotFit("st (planes requested ahead) in 1-3 (0: the synchronous sweep), "
                         "ca (copies cached in L1 too) 0 or 1")
    if cell.precision is Precision.FP16 and not h2:
        raise DoesNotFit("fp16 stages planes by copies only with h2=1 (no conversion on staging)")
    if cell.shape.nx % ch or (tx * vx) % ch:
        raise DoesNotFit(f"NX={cell.shape.nx} and the tile width tx*vx={tx * vx} must be "
                         f"multiples of {ch} (16-byte copies)")
    if ch < cell.radius:
        raise DoesNotFit("the 16-byte x halo must cover the radius")
    if shared_bytes(cell, tx, ty, vx, ry, st) > MAX_SHARED:
        raise DoesNotFit("the stages exceed the shared memory of a block")


def source(cell: Cell, tx: int, ty: int, vx: int, ry: int, lz: int, h2: int, cw: int,
           minb: int, st: int, ca: int, l2p: int = 0, sc: int = 0, bi: TileIndex = XYZ) -> str:
    p = cell.precision
    t = p.ctype
    r = cell.radius
    bx, by = tx * vx, ty * ry
    ch = 16 // p.itemsize
    sw, sh = bx + 2 * ch, by + 2 * r
    weights, halves = planesweep.weight_decls(cell, h2, cw)
    body = (planesweep.accumulate_h2(cell, vx, ry, "cur") if h2
            else planesweep.accumulate(cell, vx, ry, "cur"))
    acc_body = "\n      ".join(body)
    init, tail = planesweep.accumulators(cell, vx, ry, sc)
    return f"""{header(cell)}{extents(cell)}typedef {p.acc_ctype} ACC;
{weights}constexpr int SW = {sw}, SH = {sh}, NT = {tx * ty}, CH = {ch}, PAD = {ch};
constexpr int CPR = SW / CH, CPP = SH * CPR, K = (CPP + NT - 1) / NT, SPL = SH * SW;
constexpr int ST = {st}, NS = ST + 2;
{copies(t, ca, l2p)}
extern "C" __global__ void __launch_bounds__({bounds(tx * ty, minb)})
planesweep(const {t}* __restrict__ src, {t}* __restrict__ dst) {{
  extern __shared__ __align__(16) unsigned char kf_smem[];
  {t}* const S = reinterpret_cast<{t}*>(kf_smem);{halves}
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * {tx} + tx;
  const long bx0 = (long){bi.x} * {bx}, by0 = (long){bi.y} * {by};
  const long gx0 = bx0 + tx * {vx}, gy0 = by0 + ty * {ry};
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
{CHUNKS}{init}
  // planes zb - R .. zb - R + ST - 1 requested, one commit group each
  #pragma unroll
  for (int k = 0; k < ST; ++k) {{
    if (zb - R + k < ze + R) {{
    {stage("k", "zb - R + k")}
    }}
    KF_COMMIT();
  }}
  int s_cur = 0, s_new = ST;  // stages of planes k and k + ST
  for (long k = zb - R; k < ze + R; ++k) {{
    if (k + ST < ze + R) {{
    {stage("s_new", "k + ST")}
    }}
    KF_COMMIT();
    KF_WAIT({st});
    __syncthreads();
    const {t}* const cur = S + s_cur * SPL + (PAD - R);  // staged column 0: x = gx0 - R
    {{
      {acc_body}
    }}
{tail}
    s_cur = s_cur + 1 == NS ? 0 : s_cur + 1;
    s_new = s_new + 1 == NS ? 0 : s_new + 1;
  }}
}}
"""

