"""The z-marching design with the planes staged by asynchronous copies (star stencils).

Same outputs per thread as :mod:`.zmarch` (``vx`` consecutive x points of one row, a register
queue of the column's ``2R+1`` planes along z), but the input planes reach the block through a
ring of ``R + st + 2`` shared-memory stages filled with ``cp.async`` (16-byte copies from global
to shared memory that hold no registers while in flight): while plane ``z`` is computed, planes
up to ``z + R + st`` are already requested. The zmarch kernels keep at most ``pf`` vector loads
in flight per thread in registers, which on the H200 leaves the single-array star cells at
60-85% of the copy bandwidth; here the bytes in flight per SM are ``st`` whole tiles per block.

Each stage holds the block's tile (``tx*vx`` x ``ty`` points) with an ``R``-row y halo and a
16-byte x halo on each side (so every copy is aligned), in the storage type. Per plane: one
barrier; x and y neighbours and the queue's new centre value come from shared memory.

Stage reuse: iteration ``i`` requests plane ``i + R + st`` into the stage that held plane
``i - 2``; every thread passed iteration ``i - 1``'s barrier, so every read of plane ``i - 2``
(iteration ``i - 2``) is done. ``cp.async.wait_group st`` then leaves only the ``st`` newest
planes in flight, so plane ``i + R`` (the queue's new centre) has landed; the barrier makes the
other threads' copies visible.

``ca=1``: the copies are ``cp.async.ca`` (cached in L1 as well) instead of
``.cg`` (L2 only). The tiles of neighbouring blocks overlap by their halo rows and planes; a
neighbour that runs on the same SM soon after may find them in L1 instead of reading them
through L2, which Nsight found to be the star kernels' limit. On the H200 the four table
operators of this design take 0.834-0.875x of their speed with ``ca=0``.

``l2p`` (128 or 256): the copies carry an L2 prefetch size (``cp.async...L2::256B``):
on a miss the L2 fetches that many aligned bytes from DRAM, not only the missed sectors (the
queue's few warm-up loads straight from global memory stay plain).

``sc``: the whole-vector output stores as ``st.global.cs`` (``__stcs``, evict-first),
as z-marching's ``sc``.

``h2=1`` (fp16, even ``vx``): the queue holds lane pairs as ``__half2`` and each
output pair is one ``HFMA2`` chain, as in :mod:`.zmarch_h2` (whose sums and lane selection this
reuses); the x halo scalars and the y rows are read from the staged plane without conversion.
With ``h2=0`` the generated source is byte for byte the one before ``h2`` existed.

On the host emulator (``KERNFORGE_EMULATION``) a copy is a plain 16-byte move and the waits are
no-ops (every copy has landed when it returns), so the emulator checks the indexing, the halo
and the stage rotation, not the asynchrony; the GPU checks run the real copies against the
oracle.
"""

from __future__ import annotations

from ..operator import Launch, Operator
from ..spec import Cell, Precision
from . import zmarch_h2, zmarch_rows, zmarch_staged
from .common import (
    XYZ,
    DoesNotFit,
    TileIndex,
    cdiv,
    extents,
    half2_weights,
    header,
    l2_prefetch,
    lane_stores,
    launch_order,
    load,
    ping_pong,
    store,
    tile_index,
    weight_defs,
)
from .design import BIT, L2P, Design, Space, knobs, precision_options

MAX_SHARED = zmarch_staged.MAX_SHARED


def shared_bytes(cell: Cell, tx: int, ty: int, vx: int, st: int) -> int:
    item = cell.precision.itemsize
    pad = 16 // item
    return (cell.radius + st + 2) * (ty + 2 * cell.radius) * (tx * vx + 2 * pad) * item


def copies(t: str, ca: int = 0, l2p: int = 0) -> str:
    """The asynchronous 16-byte copy, its commit and wait (PTX), and their host forms; ``l2p``:
    the copies' L2 prefetch size (:func:`.common.l2_prefetch`)."""
    hint = l2_prefetch(l2p)
    return f"""#if defined(__CUDA_ARCH__) && !defined(KERNFORGE_EMULATION)
__device__ __forceinline__ void kf_cp16({t}* s, const {t}* g) {{
  const unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.{'ca' if ca else 'cg'}.shared.global{hint} [%0], [%1], 16;\\n" :: "r"(a), "l"(g) : "memory");
}}
#define KF_COMMIT() asm volatile("cp.async.commit_group;\\n" ::: "memory")
#define KF_WAIT(n) asm volatile("cp.async.wait_group " #n ";\\n" ::: "memory")
#else
__device__ __forceinline__ void kf_cp16({t}* s, const {t}* g) {{
  *reinterpret_cast<uint4*>(s) = *reinterpret_cast<const uint4*>(g);
}}
#define KF_COMMIT() ((void)0)
#define KF_WAIT(n) ((void)0)
#endif
"""


# this thread's 16-byte chunks of a staged tile (rows from by0 - R, columns from bx0 - PAD)
CHUNKS = """  // this thread's 16-byte chunks of a staged tile: global offset in a plane (-1: outside the
  // array) and offset in a stage; the same for every plane
  long go[K];
  int sof[K];
  #pragma unroll
  for (int j = 0; j < K; ++j) {
    const int c = tid + j * NT, row = c / CPR, cc = (c - row * CPR) * CH;
    const long gy = by0 - R + row, gx = bx0 - PAD + cc;
    const bool in = c < CPP && gy >= 0 && gy < NY && gx >= 0 && gx < NX;
    go[j] = in ? gy * NX + gx : -1;
    sof[j] = row * SW + cc;
  }
"""


def stage(slot: str, plane: str) -> str:
    """Request plane ``plane``'s tile into stage ``slot``: this thread's chunks, whose offsets
    (the same in every plane) were computed once."""
    return (f"#pragma unroll\n    for (int j = 0; j < K; ++j) if (go[j] >= 0) "
            f"kf_cp16(S + ({slot}) * SPL + sof[j], src + ({plane}) * (NY * NX) + go[j]);")


def _kernel(cell: Cell, tx: int, ty: int, vx: int, lz: int, st: int, h2: int = 0,
            sc: int = 0, bi: TileIndex = XYZ) -> str:
    p = cell.precision
    t = p.ctype
    r = cell.radius
    qn = 2 * r + 1
    body = []
    for d in range(1, r + 1):
        for sgn, tag in ((-1, "m"), (1, "p")):
            body.append(f"const Vec y{tag}{d} = *reinterpret_cast<const Vec*>"
                        f"(cur + so + ({sgn * d}) * SW);")
    if h2:  # the queue as lane pairs, the sums as HFMA2 chains (as zmarch h2=1)
        n, qt, weights = vx // 2, "__half2", half2_weights(cell)
        body += [f"const __half xl{d} = cur[so - {d}], xr{d} = cur[so + {vx - 1 + d}];"
                 for d in range(1, r + 1)]
        body += zmarch_h2.sums(cell, vx, 0)
        whole = " ".join(f"reinterpret_cast<__half2*>(o.v)[{k}] = res[{k}];" for k in range(n))
        _, lanes = lane_stores(vx, lambda i: zmarch_h2.lane(vx, i, "res"))

        def fill(j: object) -> list[str]:
            return [f"q[{j}][{k}] = reinterpret_cast<const __half2*>(c.v)[{k}];"
                    for k in range(n)]
    else:
        n, qt, weights = vx, "ACC", ""  # (declared with VX: sources as before h2)
        body += [f"const ACC xl{d} = {load(p, f'cur[so - {d}]')}, "
                 f"xr{d} = {load(p, f'cur[so + {vx - 1 + d}]')};" for d in range(1, r + 1)]
        body += zmarch_staged.lane_sums(cell, vx, lambda v: load(p, v), "")
        whole, lanes = lane_stores(vx, lambda i: store(p, f"res[{i}]"))

        def fill(j: object) -> list[str]:
            return [f"q[{j}][{lane}] = {load(p, f'c.v[{lane}]')};" for lane in range(vx)]
    push = "\n".join("      " + line for line in fill(qn - 1))
    prime = "\n".join("      " + line for line in fill("j"))
    shift = "\n".join(f"    #pragma unroll\n    for (int j = 0; j < {qn - 1}; ++j) "
                      f"q[j][{k}] = q[j + 1][{k}];" for k in range(n))
    nl = "\n      "
    put = zmarch_rows.store_whole(cell, vx, sc, "base")  # one vector store, or __stcs pieces
    return f"""
extern "C" __global__ void __launch_bounds__(NT)
ztile(const {t}* __restrict__ src, {t}* __restrict__ dst) {{
{weights}  extern __shared__ __align__(16) unsigned char kf_smem[];
  {t}* const S = reinterpret_cast<{t}*>(kf_smem);
  const int tid = threadIdx.y * {tx} + threadIdx.x;
  const long bx0 = (long){bi.x} * {tx * vx}, by0 = (long){bi.y} * {ty};
  const long x0 = bx0 + threadIdx.x * VX, y = by0 + threadIdx.y;
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
  const bool col = y < NY && x0 < NX;
  const bool act = y >= R && y < NY - R && x0 < NX - R && x0 + VX > R;
  const int so = (threadIdx.y + R) * SW + PAD + threadIdx.x * VX;
{CHUNKS}  // planes zb .. zb + R + ST - 1 requested, one commit group each
  #pragma unroll
  for (int k = 0; k < R + ST; ++k) {{
    if (zb + k < ze + R) {{
    {stage("k", "zb + k")}
    }}
    KF_COMMIT();
  }}
  {qt} q[{qn}][{n if h2 else "VX"}] = {{}};
  #pragma unroll
  for (int j = 0; j < {qn - 1}; ++j) if (col) {{
    const Vec c = *reinterpret_cast<const Vec*>(src + ((zb - R + j) * NY + y) * NX + x0);
{prime}
  }}
  int s_cur = 0, s_top = R, s_new = R + ST;  // stages of planes z, z + R, z + R + ST
  for (long z = zb; z < ze; ++z) {{
    if (z + R + ST < ze + R) {{
    {stage("s_new", "z + R + ST")}
    }}
    KF_COMMIT();
    KF_WAIT({st});
    __syncthreads();
    const {t}* const cur = S + s_cur * SPL;
    if (col) {{
      const Vec c = *reinterpret_cast<const Vec*>(S + s_top * SPL + so);
{push}
    }}
    if (act) {{
      const long base = (z * NY + y) * NX + x0;
      {qt} res[{n if h2 else "VX"}];
      {nl.join(body)}
      if (x0 >= R && x0 + VX <= NX - R) {{ Vec o; {whole} {put} }}
      else {{ {lanes} }}
    }}
{shift}
    s_cur = s_cur + 1 == NS ? 0 : s_cur + 1;
    s_top = s_top + 1 == NS ? 0 : s_top + 1;
    s_new = s_new + 1 == NS ? 0 : s_new + 1;
  }}
}}
"""


def generate(cell: Cell, tx: int = 32, ty: int = 8, vx: int = 4, lz: int = 0,
             st: int = 2, ca: int = 0, h2: int = 0, l2p: int = 0, sc: int = 0,
             zo: int = 0) -> Operator:
    if cell.stencil.kind != "star":
        raise DoesNotFit(f"ztile handles star stencils, not {cell.stencil.name}")
    item = cell.precision.itemsize
    ch = 16 // item  # elements per 16-byte copy
    if cell.shape.nx % ch or (tx * vx) % ch:
        raise DoesNotFit(f"NX={cell.shape.nx} and the tile width tx*vx={tx * vx} must be "
                         f"multiples of {ch} (16-byte copies)")
    if vx < cell.radius or vx * item > 16 or vx not in (1, 2, 4, 8):
        raise DoesNotFit(f"vx={vx}: 1, 2, 4 or 8 lanes, >= the radius, <= 16 bytes")
    if st not in (1, 2, 3, 4, 6):
        raise DoesNotFit("st (planes requested ahead) in 1, 2, 3, 4, 6")
    if ca not in (0, 1) or sc not in (0, 1):
        raise DoesNotFit("ca (copies cached in L1 too) and sc (streaming stores) are 0 or 1")
    if h2 not in (0, 1) or (h2 and (cell.precision is not Precision.FP16 or vx % 2)):
        raise DoesNotFit("h2 (half2 arithmetic) is 0 or 1, and 1 needs fp16 and an even vx")
    bi = tile_index(zo)  # the launch order: where the tile coordinates are
    shared = shared_bytes(cell, tx, ty, vx, st)
    if shared > MAX_SHARED:
        raise DoesNotFit("the stages exceed the shared memory of a block")
    nz_int = cell.shape.nz - 2 * cell.radius
    lz = nz_int if lz <= 0 else min(lz, nz_int)
    r = cell.radius
    pad = ch
    sw = tx * vx + 2 * pad
    consts = (f"typedef {cell.precision.acc_ctype} ACC;\n"
              f"constexpr int VX = {vx}, ST = {st}, NS = R + ST + 2, NT = {tx * ty};\n"
              f"constexpr int CH = {ch}, PAD = {pad}, SW = {sw}, CPR = SW / CH, "
              f"SPL = {ty + 2 * r} * SW, CPP = {ty + 2 * r} * CPR, K = (CPP + NT - 1) / NT;\n"
              f"struct __align__({item * vx}) Vec {{ {cell.precision.ctype} v[{vx}]; }};\n")
    source = (header(cell) + extents(cell) + weight_defs(cell) + consts
              + copies(cell.precision.ctype, ca, l2p)
              + _kernel(cell, tx, ty, vx, lz, st, h2, sc, bi))
    grid = (cdiv(cell.shape.nx, tx * vx), cdiv(cell.shape.ny, ty), cdiv(nz_int, lz))
    launches = tuple(Launch("ztile", grid, (tx, ty, 1), (a, b), shared)
                     for a, b in ping_pong(cell.stencil.steps))
    params = {"tx": tx, "ty": ty, "vx": vx, "lz": lz, "st": st, **({"ca": 1} if ca else {}),
              **({"h2": 1} if h2 else {}), **({"l2p": l2p} if l2p else {}),
              **({"sc": 1} if sc else {})}
    return launch_order(Operator(cell.id, "ztile", params, source, launches), zo)


WIDTHS = {Precision.FP16: (8, 4), Precision.FP32: (4, 2), Precision.FP64: (2,)}  # 16 bytes


def space(cell: Cell) -> Space:
    """Each parameter's values, the default first (``l1``: the largest L1 for ``ca=1``'s
    cached copies; no ``cw``)."""
    return {"vx": WIDTHS[cell.precision], "lz": (64, 32, 128, 16, 8), "ty": (8, 4, 16),
            "tx": (32, 64, 16), "st": (2, 1, 3, 4), "zo": BIT, "ca": BIT, "l1": BIT,
            "l2p": L2P, "sc": BIT, **precision_options(cell, cw=False)}


KNOBS = knobs(
    "vx", "lz", "ty", "tx", "zo", "ca", "l1", "l2p", "sc",
    st="planes ahead: requested by asynchronous copies into a shared-memory ring",
    h2="fp16 pairs: __half2 arithmetic (HFMA2) over lane pairs, fp16 sums")

DESIGN = Design("ztile", {"star": 1, "temporal": 2}, space, generate, KNOBS)
